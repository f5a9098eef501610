//! The CPU saxpy the kernel in `kernels/` is tested against.

/// `a * x[i] + y[i]` for each element.
pub fn saxpy(a: f32, x: &[f32], y: &[f32]) -> Vec<f32> {
    x.iter().zip(y).map(|(x, y)| a * x + y).collect()
}
