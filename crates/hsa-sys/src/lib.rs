//! Raw HSA bindings, loaded at run time.
