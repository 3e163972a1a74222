//! Bringing the gateway up, running its control loop, and taking it down.

pub mod app;
