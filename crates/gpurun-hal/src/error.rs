//! Errors a backend can raise. Messages are lowercase fragments that read after "failed to ...".

use crate::BackendKind;

/// Something the caller could not have checked beforehand.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The backend's driver or runtime library is absent.
    #[error("{0}")]
    NotAvailable(String),
    /// The runtime is there but refused to start or to open the device.
    #[error("{backend} backend: {message}")]
    Runtime {
        backend: BackendKind,
        message: String,
    },
    /// The image cannot run on this backend (wrong kind, wrong arch).
    #[error("{0}")]
    Incompatible(String),
    /// A symbol or kernel the caller asked for is not in the loaded image.
    #[error("no {what} named `{name}` in the image")]
    MissingSymbol { what: &'static str, name: String },
    /// Bad arguments from the caller (sizes, shapes).
    #[error("{0}")]
    InvalidArgument(String),
    /// The device broke the RPC protocol (unknown opcode, absurd size, ...).
    #[error("device RPC error: {0}")]
    Rpc(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}
