//! placeholder: backend
