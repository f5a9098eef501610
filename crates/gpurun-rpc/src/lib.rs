//! The host/device RPC protocol (see the crate description). Filled in by issue #3.
#![no_std]
