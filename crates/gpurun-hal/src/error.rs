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
    /// A kernel of this process faulted earlier on a backend whose driver refuses all work in
    /// the process after a fault (CUDA): nothing more can be loaded or run on it here.
    #[error(
        "{backend} backend: nothing more can run on the GPU in this process: kernel `{kernel}` \
         faulted earlier ({fault}), and after a fault the driver refuses all work in the process"
    )]
    EarlierFault {
        backend: BackendKind,
        kernel: String,
        fault: String,
    },
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
