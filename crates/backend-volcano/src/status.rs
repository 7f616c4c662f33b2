//! placeholder: status
