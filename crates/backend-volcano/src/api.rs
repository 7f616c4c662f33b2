//! placeholder: api
