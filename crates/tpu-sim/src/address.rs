//! Pure: no IO (checked by `cargo xtask tidy`).
//!
//! The simulator's private network: `10.X.0.0/16`, the bridge (gateway) at `10.X.0.1`, worker
//! addresses handed out in turn and never reused in a simulator's life.

/// Worker addresses a simulator hands out: its network is `10.X.0.0/16`, `10.X.0.1` is the
/// bridge (gateway), workers get `.2`-`.254` of each /24 in turn.
pub(crate) const MAX_ADDRESSES: u32 = 253 * 256;

/// The address of worker address number `n` in the network `10.{net}.0.0/16`.
pub(crate) fn worker_address(net: u8, n: u32) -> String {
    format!("10.{net}.{}.{}", n / 253, n % 253 + 2)
}

/// The bridge's own address, where the API is served to workers.
pub(crate) fn gateway(net: u8) -> String {
    format!("10.{net}.0.1")
}
