//! Kernel arguments from Rust values: scalars as themselves, buffers as device pointers.

use gpurun_hal::kernel_args::KernelArg;

use crate::gpu::Buffer;

/// Element types a [`Buffer`] can hold: plain data that has the same layout on the host and
/// the device, for which every bit pattern is a value.
///
/// # Safety
/// Implement only for `Copy` types without padding, pointers or invalid bit patterns.
pub unsafe trait DeviceCopy: Copy + 'static {}

macro_rules! device_copy {
    ($($ty:ty),*) => { $(
        // SAFETY: a primitive number: no padding, every bit pattern valid.
        unsafe impl DeviceCopy for $ty {}
    )* };
}
device_copy!(u8, i8, u16, i16, u32, i32, u64, i64, f32, f64);

// SAFETY: an array of such values has no padding between or around its elements.
unsafe impl<T: DeviceCopy, const N: usize> DeviceCopy for [T; N] {}

/// A buffer passed to a launch on another loaded image than its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForeignBuffer;

/// One kernel argument, with what it came from (for the signature check).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arg {
    /// A Rust scalar.
    Scalar(KernelArg),
    /// A [`Buffer`]: its device address and size in bytes.
    Buffer { address: u64, bytes: usize },
    /// A [`KernelArg`] given as is.
    Raw(KernelArg),
}

impl Arg {
    /// What the kernel receives.
    pub fn value(self) -> KernelArg {
        match self {
            Arg::Scalar(value) | Arg::Raw(value) => value,
            Arg::Buffer { address, .. } => KernelArg::U64(address),
        }
    }

    /// In words, for error messages.
    pub(crate) fn describe(self) -> String {
        let scalar = |value: KernelArg| match value {
            KernelArg::I32(_) => "an i32",
            KernelArg::U32(_) => "a u32",
            KernelArg::U64(_) => "a u64",
            KernelArg::F32(_) => "an f32",
            KernelArg::F64(_) => "an f64",
        };
        match self {
            Arg::Scalar(value) => scalar(value).to_string(),
            Arg::Buffer { .. } => "a buffer".to_string(),
            Arg::Raw(value) => format!("{} (a raw KernelArg)", scalar(value)),
        }
    }
}

/// One kernel argument. `gpu` identifies the loaded image a launch runs on; a buffer of
/// another one is refused.
pub trait IntoKernelArg {
    fn into_kernel_arg(self, gpu: u64) -> Result<Arg, ForeignBuffer>;
}

macro_rules! scalar {
    ($($ty:ty => |$v:ident| $arg:expr),*) => { $(
        impl IntoKernelArg for $ty {
            fn into_kernel_arg(self, _gpu: u64) -> Result<Arg, ForeignBuffer> {
                let $v = self;
                Ok(Arg::Scalar($arg))
            }
        }
    )* };
}
// 64-bit targets only (nvptx64, amdgcn, x86-64, aarch64): `usize` is a `u64` on both sides;
// an `i64` travels as its bits.
scalar!(
    i32 => |v| KernelArg::I32(v),
    u32 => |v| KernelArg::U32(v),
    u64 => |v| KernelArg::U64(v),
    i64 => |v| KernelArg::U64(v as u64),
    usize => |v| KernelArg::U64(v as u64),
    f32 => |v| KernelArg::F32(v),
    f64 => |v| KernelArg::F64(v)
);

impl IntoKernelArg for crate::HostFunction {
    fn into_kernel_arg(self, _gpu: u64) -> Result<Arg, ForeignBuffer> {
        Ok(Arg::Scalar(KernelArg::U64(self.0)))
    }
}

impl IntoKernelArg for KernelArg {
    fn into_kernel_arg(self, _gpu: u64) -> Result<Arg, ForeignBuffer> {
        Ok(Arg::Raw(self))
    }
}

impl<T: DeviceCopy> IntoKernelArg for &Buffer<'_, T> {
    fn into_kernel_arg(self, gpu: u64) -> Result<Arg, ForeignBuffer> {
        if self.owner() != gpu {
            return Err(ForeignBuffer);
        }
        Ok(Arg::Buffer {
            address: self.device_address(),
            bytes: self.len() * std::mem::size_of::<T>(),
        })
    }
}

impl<T: DeviceCopy> IntoKernelArg for &mut Buffer<'_, T> {
    fn into_kernel_arg(self, gpu: u64) -> Result<Arg, ForeignBuffer> {
        (&*self).into_kernel_arg(gpu)
    }
}

/// A launch's arguments: a tuple (up to 12) of [`IntoKernelArg`]s, `()` for none, or a
/// `Vec<KernelArg>` built by hand.
pub trait KernelArgs {
    /// The arguments in order; `Err(index)` for a buffer of another loaded image.
    fn kernel_args(self, gpu: u64) -> Result<Vec<Arg>, usize>;
}

impl KernelArgs for Vec<KernelArg> {
    fn kernel_args(self, _gpu: u64) -> Result<Vec<Arg>, usize> {
        Ok(self.into_iter().map(Arg::Raw).collect())
    }
}

macro_rules! tuple {
    ($($name:ident $index:tt),*) => {
        impl<$($name: IntoKernelArg),*> KernelArgs for ($($name,)*) {
            #[allow(unused_variables)]
            fn kernel_args(self, gpu: u64) -> Result<Vec<Arg>, usize> {
                Ok(vec![$(self.$index.into_kernel_arg(gpu).map_err(|ForeignBuffer| -> usize { $index })?),*])
            }
        }
    };
}
tuple!();
tuple!(A 0);
tuple!(A 0, B 1);
tuple!(A 0, B 1, C 2);
tuple!(A 0, B 1, C 2, D 3);
tuple!(A 0, B 1, C 2, D 3, E 4);
tuple!(A 0, B 1, C 2, D 3, E 4, F 5);
tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);
tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8);
tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9);
tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10);
tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_keep_their_width_and_class() {
        let args: Vec<KernelArg> = (1i32, 2u32, 3u64, -1i64, 4usize, 2.5f32, 0.5f64)
            .kernel_args(0)
            .unwrap()
            .into_iter()
            .map(Arg::value)
            .collect();
        assert_eq!(
            args,
            vec![
                KernelArg::I32(1),
                KernelArg::U32(2),
                KernelArg::U64(3),
                KernelArg::U64(u64::MAX),
                KernelArg::U64(4),
                KernelArg::F32(2.5),
                KernelArg::F64(0.5),
            ]
        );
        assert_eq!(().kernel_args(0).unwrap(), vec![]);
    }
}
