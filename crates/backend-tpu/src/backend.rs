//! (part of issue 27: filled by its part)
