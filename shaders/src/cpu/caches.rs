//! The data caches a CPU reports, which the GEMM sizes its blocks from: read once, with the
//! instruction set ([`Isa`](super::Isa)), and passed down with it.

/// Sizes in bytes of the data caches one core sees (the last level is shared).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CacheSizes {
    /// Level-1 data cache.
    pub l1d: u32,
    /// Level-2 cache.
    pub l2: u32,
    /// Last-level cache.
    pub l3: u32,
}

impl CacheSizes {
    /// What a CPU of the last decade has at least: 32 KiB L1d, 1 MiB L2, 8 MiB L3. Used
    /// where the system does not say.
    pub const TYPICAL: CacheSizes = CacheSizes {
        l1d: 32 << 10,
        l2: 1 << 20,
        l3: 8 << 20,
    };

    /// The caches of CPU 0 as Linux reports them (`/sys/devices/system/cpu/cpu0/cache`),
    /// each level that is missing or unreadable taken from [`TYPICAL`](Self::TYPICAL).
    ///
    /// ```
    /// use burn_amp_kernels::cpu::caches::CacheSizes;
    ///
    /// let caches = CacheSizes::detect();
    /// assert!(caches.l1d >= 4 << 10 && caches.l2 >= caches.l1d);
    /// ```
    pub fn detect() -> CacheSizes {
        let mut found = Self::TYPICAL;
        let dir = std::path::Path::new("/sys/devices/system/cpu/cpu0/cache");
        let Ok(entries) = std::fs::read_dir(dir) else {
            return found;
        };
        for entry in entries.flatten() {
            let read = |name: &str| std::fs::read_to_string(entry.path().join(name)).ok();
            let (Some(level), Some(kind), Some(size)) = (read("level"), read("type"), read("size"))
            else {
                continue;
            };
            let Some(bytes) = parse_size(size.trim()) else {
                continue;
            };
            match (level.trim(), kind.trim()) {
                ("1", "Data" | "Unified") => found.l1d = bytes,
                ("2", _) => found.l2 = bytes,
                ("3", _) => found.l3 = bytes,
                _ => {}
            }
        }
        // A report that does not hold together (a VM's) is not trusted level by level.
        if found.l2 < found.l1d {
            found.l2 = Self::TYPICAL.l2.max(found.l1d);
        }
        found
    }
}

/// `"48K"`, `"2048K"`, `"32M"` or plain bytes, as sysfs writes cache sizes.
fn parse_size(s: &str) -> Option<u32> {
    let (digits, unit) = match s.as_bytes().last()? {
        b'K' => (&s[..s.len() - 1], 1u64 << 10),
        b'M' => (&s[..s.len() - 1], 1 << 20),
        b'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    let bytes = digits.parse::<u64>().ok()?.checked_mul(unit)?;
    u32::try_from(bytes).ok().filter(|&b| b > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_as_sysfs_writes_them() {
        assert_eq!(parse_size("48K"), Some(48 << 10));
        assert_eq!(parse_size("2048K"), Some(2 << 20));
        assert_eq!(parse_size("32M"), Some(32 << 20));
        assert_eq!(parse_size("512"), Some(512));
        assert_eq!(parse_size("0K"), None);
        assert_eq!(parse_size("lots"), None);
        assert_eq!(parse_size("8G"), None); // past u32: not trusted
    }
}
