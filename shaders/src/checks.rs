//! What every CubeCL launch entry checks before it hands raw buffers to a kernel: each
//! buffer holds the bytes its layout reads or writes and starts on an element boundary, and
//! every size the kernels index fits their 32-bit indices. The kernels are launched
//! unchecked (no bounds checks on the device), so these checks are what keeps a wrong
//! layout from reading or writing past a buffer.

use cubecl::server::Handle;

/// Why a launch entry refused to launch. Nothing was enqueued.
///
/// ```
/// use burn_amp_kernels::LaunchError;
///
/// let err = LaunchError::TooShort { buffer: "scales", needed: 16, got: 4 };
/// assert_eq!(err.to_string(), "buffer `scales` holds 4 bytes; the launch needs 16");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchError {
    /// A buffer holds fewer bytes (from its offset on) than the layout reads or writes.
    #[error("buffer `{buffer}` holds {got} bytes; the launch needs {needed}")]
    TooShort {
        /// The argument's name.
        buffer: &'static str,
        /// Bytes the layout reads or writes.
        needed: u64,
        /// Bytes the buffer holds from its offset on.
        got: u64,
    },
    /// A buffer starts at a byte offset that is not a multiple of its element size.
    #[error("buffer `{buffer}` starts at byte offset {offset}, not a multiple of {align}")]
    Misaligned {
        /// The argument's name.
        buffer: &'static str,
        /// Its offset in bytes.
        offset: u64,
        /// Its element size in bytes.
        align: u64,
    },
    /// The layout does not hold together (a zero block size, a length that is not a
    /// whole number of rows, ...).
    #[error("invalid layout: {0}")]
    Layout(String),
    /// A size past the kernels' 32-bit indices.
    #[error("{what} is {value}, past the kernels' 32-bit indexing")]
    TooLarge {
        /// What was counted.
        what: &'static str,
        /// Its value.
        value: u64,
    },
}

/// Checks that `handle` holds `elems` elements of `elem_size` bytes from its offset on,
/// starting on an element boundary.
pub(crate) fn buffer(
    name: &'static str,
    handle: &Handle,
    elems: u64,
    elem_size: usize,
) -> Result<(), LaunchError> {
    let align = elem_size as u64;
    let offset = handle.offset_start.unwrap_or(0);
    if !offset.is_multiple_of(align) {
        return Err(LaunchError::Misaligned {
            buffer: name,
            offset,
            align,
        });
    }
    let needed = elems * align;
    let got = handle.size_in_used();
    if got < needed {
        return Err(LaunchError::TooShort {
            buffer: name,
            needed,
            got,
        });
    }
    Ok(())
}

/// The product of `factors` as a 32-bit count, or [`LaunchError::TooLarge`].
pub(crate) fn count(what: &'static str, factors: &[u32]) -> Result<u32, LaunchError> {
    let value = factors.iter().map(|&f| u64::from(f)).product::<u64>();
    u32::try_from(value).map_err(|_| LaunchError::TooLarge { what, value })
}

/// [`LaunchError::Layout`] unless `holds`.
pub(crate) fn layout(holds: bool, what: impl FnOnce() -> String) -> Result<(), LaunchError> {
    if holds {
        Ok(())
    } else {
        Err(LaunchError::Layout(what()))
    }
}
