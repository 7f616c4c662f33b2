//! Integration tests of the SSH transport and the plain backend.
