//! The ledger: every submission in SQLite under the user's state dir.
