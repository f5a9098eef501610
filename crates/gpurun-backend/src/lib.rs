//! The Device trait and its backends.
