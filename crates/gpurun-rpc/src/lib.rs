//! The host/device RPC channel of cargo-gpurun: the device prints, allocates, exits and reports
//! test results through it, and the host serves those requests.
//!
//! The wire format is LLVM libc's GPU RPC, so an LLVM-libc GPU image can talk to our server and
//! our device runtime could talk to LLVM's server:
//!
//! - [`layout`]: the shared allocation (doorbell, two mailbox arrays, headers, per-lane packets),
//!   the `__llvm_rpc_client` object image, and the choice between the current and the legacy
//!   layout from the size of an image's client symbol.
//! - [`client`]: the device side. A warp opens a port ([`Client::open`]), exchanges 64-byte
//!   packets per lane ([`client::Port::send`], [`client::Port::recv`]) or byte strings of any size
//!   ([`client::Port::send_n`], [`client::Port::recv_n`]) and closes the port on drop.
//! - [`server`]: the host side. It scans for ports with pending work ([`Server::try_open`]) and
//!   answers them. It never trusts the shared memory: masks, sizes and opcodes are bounded.
//! - [`lanes`]: the warp operations the client needs (lane id, active mask, ballot, broadcast,
//!   sync, sleep), implemented for nvptx, amdgpu and host threads.
//! - [`host_waits`]: blocking (futex) waits for when client and server are both host threads.
//! - [`opcode`]: LLVM libc's opcode numbers and our own (`'g'` class), with the message sequence
//!   of each one.
//! - [`calls`]: the client side of each request our device runtime makes, written once (the
//!   runtime and the host's scripted backend both use it).
//!
//! Owns: the protocol, layout-compatible with LLVM libc. Must not: know any backend, allocate on
//! the device, or decide what a request means for a test (the handlers are `gpurun-hal`'s).
//!
//! Mailbox words are accessed with relaxed system-scope atomics plus acquire/release fences (every
//! lane fences and stores the outbox flip itself, as LLVM's client); the lock bits with
//! device-scope read-modify-writes and fences on nvptx (forced there, where the compiler drops
//! the scope) and system-scope ones on amdgcn, where Rust cannot name a narrower scope
//! ([`sync`] says what each costs).
//!
//! # Use
//!
//! Loader/host: pick the layout from the image (`Layout::for_client_symbol_size(size_of_symbol,
//! ports, lane_size)`), allocate `allocation_size()` bytes of host-visible memory (64-byte
//! aligned), [`Layout::zero`] it, copy `layout.client_image(device_address_of_base).as_bytes()`
//! into `__llvm_rpc_client`, build a [`Server`] over the host pointer and run a thread that calls
//! [`Server::next_request`] (or [`Server::next_request_exclusive`] when only that thread serves)
//! and answers each port by its [`opcode`]. [`Server::cancel`] unblocks it
//! when a kernel dies mid-conversation. The doorbell is optional: zero means the server scans
//! the mailboxes; with [`Layout::write_doorbell`] and [`Server::attach_doorbell`] every client
//! open counts a request and the server can sleep while none is open
//! (`Server::wait_for_request`, with the `std` feature).
//!
//! Device: `#[no_mangle] static __llvm_rpc_client: Client = Client::uninit();`, then
//! `__llvm_rpc_client.open::<{ opcode::X }, _>(&lanes::Warp)` (the opcode a constant, as in
//! LLVM's client, so that lanes of different calls never share a port; a [`HostLane`] in the
//! host emulation, where each emulated GPU thread talks alone in its own lane slot, may use
//! [`Client::open_on_host`] with an opcode chosen at run time) and the sequence of
//! `send`/`recv`/`send_n`/`recv_n` documented for that opcode. The client path never panics, so
//! the panic handler can use it.
#![no_std]
#![cfg_attr(target_arch = "nvptx64", feature(asm_experimental_arch))]
#![cfg_attr(
    target_arch = "amdgpu",
    feature(stdarch_amdgpu, link_llvm_intrinsics, abi_unadjusted),
    allow(internal_features)
)]

#[cfg(feature = "alloc")]
extern crate alloc;
#[cfg(any(test, feature = "std"))]
extern crate std;

mod arch;
pub mod calls;
pub mod client;
pub mod host_waits;
pub mod lanes;
pub mod layout;
pub mod opcode;
pub mod server;
pub mod sync;

pub use client::Client;
pub use lanes::{HostLane, Lanes};
pub use layout::{
    Buffer, ClientImage, Doorbell, Header, Layout, LayoutError, CLIENT_SIZE, LEGACY_CLIENT_SIZE,
    LEGACY_MAX_PORT_COUNT, MAX_PORT_COUNT,
};
pub use server::{Server, ServerError};
