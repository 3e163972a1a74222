//! Zero-copy views over packet bytes.
