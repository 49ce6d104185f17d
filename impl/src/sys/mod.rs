//! What lockd asks of the operating system, sockets and files, real or simulated.
//!
//! The server (`crate::server`), the client library (`crate::client`) and the data dir
//! (`crate::storage`) reach the network and the disk only through this module. Outside a
//! simulation it is tokio's sockets and `std::fs`. With the `sim` feature, inside a turmoil
//! simulation (`locksmith sim`), the same calls go to turmoil's simulated network and its
//! per-host crash-consistent disk, so that the code that ships is the code that is
//! simulated: nothing above this module knows which one it runs on.
//!
//! The choice is made per call by [`simulated`], which is true only on a thread that is
//! running a turmoil host. A production build without the `sim` feature compiles the real
//! arm only.

pub mod fs;
pub mod net;

/// Whether this call runs inside a deterministic simulation.
#[inline]
pub fn simulated() -> bool {
    #[cfg(feature = "sim")]
    {
        turmoil::in_simulation()
    }
    #[cfg(not(feature = "sim"))]
    {
        false
    }
}
