//! placeholder: availability
