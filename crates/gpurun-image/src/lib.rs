//! Parse GPU images once, up front.
