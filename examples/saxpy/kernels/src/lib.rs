#![no_std]

fn saxpy_one(a: f32, x: f32, y: f32) -> f32 {
    a * x + y
}

/// `y[i] = a * x[i] + y[i]` for every `i < n`.
///
/// # Safety
/// `x` and `y` hold `n` elements (a launch with smaller buffers is an error before it runs).
#[gpurun::kernel(len(x = n, y = n))]
unsafe fn saxpy(a: f32, x: *const f32, y: *mut f32, n: usize) {
    let i = gpurun::arch::global_thread_index() as usize;
    if i < n {
        // SAFETY: i < n, and the caller passes buffers of n elements.
        unsafe { *y.add(i) = saxpy_one(a, *x.add(i), *y.add(i)) };
    }
}

#[gpurun::test]
fn saxpy_one_multiplies_and_adds() {
    assert_eq!(saxpy_one(2.0, 3.0, 1.0), 7.0);
}
