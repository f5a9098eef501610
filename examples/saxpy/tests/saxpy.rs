// Fill buffers, launch the kernel, compare with the CPU.
use gpurun_test::{DeviceCrate, Error, LaunchShape};

#[test]
fn saxpy_matches_the_cpu() -> Result<(), Error> {
    let gpu = DeviceCrate::new("kernels").load()?; // built once per process
    let n = 1000;
    let x: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let y: Vec<f32> = vec![1.0; n];
    let xs = gpu.buffer_from(&x)?;
    let mut ys = gpu.buffer_from(&y)?;
    let shape = LaunchShape::blocks(n.div_ceil(256) as u32).threads(256);
    gpu.launch("saxpy", shape, (2.0f32, &xs, &mut ys, n))?;
    assert_eq!(ys.to_vec()?, saxpy::saxpy(2.0, &x, &y));
    Ok(())
}
