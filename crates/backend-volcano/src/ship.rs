//! placeholder: ship
