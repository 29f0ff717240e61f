//! Ordering another CUDA stream's work (burn-amp's cuBLASLt products) with CubeCL's stream,
//! on the device and without a host synchronisation: a [`signal`](launch::signal) kernel on
//! CubeCL's stream marks that the inputs are written, the other stream waits for it
//! (a stream wait-value), runs, writes a second counter (a stream write-value), and a
//! [`spin`](launch::spin) kernel on CubeCL's stream waits for that counter while binding the
//! buffers the other stream reads and writes, so that nothing after it, and no reuse of those
//! buffers, runs before the other stream's work is done.

pub mod kernel;
pub mod launch;
