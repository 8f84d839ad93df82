//! The rank id type, below the transport, the store and the wire format that all name it.

/// A process's place in the job: `0..world_size`; rank 0 is the driver.
pub type Rank = usize;
