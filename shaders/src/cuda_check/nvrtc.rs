//! NVRTC, loaded at run time: compiles generated CUDA C++ to PTX for a target architecture
//! with the options cubecl-cuda 0.10 passes (`--gpu-architecture`, the CUDA include path,
//! `-lineinfo`).

use std::ffi::{CStr, CString, c_int};
use std::path::{Path, PathBuf};

use cudarc::nvrtc::{result, sys};

use super::CheckError;
use super::target::CudaTarget;

/// The NVRTC library found on this machine, with the CUDA headers to compile against.
#[derive(Clone, Debug)]
pub struct Nvrtc {
    version: (i32, i32),
    archs: Vec<u32>,
    include: PathBuf,
}

/// Why NVRTC rejected a source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompileFailure {
    /// NVRTC's log.
    pub log: String,
    /// The source lines the log points at, numbered, with two lines around each.
    pub excerpt: String,
}

impl Nvrtc {
    /// Loads NVRTC (found as cudarc finds it: `libnvrtc.so.13`, `.12`, ... on the library
    /// path) and checks that `include` (or, if `None`, the `include` folder of `CUDA_PATH`
    /// or of a system CUDA installation) holds the CUDA headers the generated code needs.
    ///
    /// # Errors
    /// [`CheckError::NvrtcMissing`] or [`CheckError::HeadersMissing`].
    pub fn load(include: Option<PathBuf>) -> Result<Self, CheckError> {
        // SAFETY: only tries to open the library under the names cudarc knows.
        if !unsafe { sys::is_culib_present() } {
            return Err(CheckError::NvrtcMissing);
        }
        let include = include
            .or_else(|| cubecl::cuda::install::cuda_path().map(|path| path.join("include")))
            .ok_or_else(|| CheckError::HeadersMissing(PathBuf::from("$CUDA_PATH/include")))?;
        if !include.join("cuda_fp16.h").is_file() {
            return Err(CheckError::HeadersMissing(include));
        }
        let (mut major, mut minor): (c_int, c_int) = (0, 0);
        let mut count: c_int = 0;
        // SAFETY: NVRTC writes two ints, then an int, then `count` ints into buffers of
        // those sizes.
        let archs = unsafe {
            sys::nvrtcVersion(&mut major, &mut minor)
                .result()
                .map_err(|err| CheckError::Nvrtc(format!("nvrtcVersion: {err:?}")))?;
            sys::nvrtcGetNumSupportedArchs(&mut count)
                .result()
                .map_err(|err| CheckError::Nvrtc(format!("nvrtcGetNumSupportedArchs: {err:?}")))?;
            let mut archs = vec![0 as c_int; count.max(0) as usize];
            sys::nvrtcGetSupportedArchs(archs.as_mut_ptr())
                .result()
                .map_err(|err| CheckError::Nvrtc(format!("nvrtcGetSupportedArchs: {err:?}")))?;
            archs
        };
        Ok(Self {
            version: (major, minor),
            archs: archs.into_iter().map(|sm| sm as u32).collect(),
            include,
        })
    }

    /// NVRTC's version, e.g. `(13, 0)`.
    pub fn version(&self) -> (i32, i32) {
        self.version
    }

    /// The folder of CUDA headers compiled against.
    pub fn include(&self) -> &Path {
        &self.include
    }

    /// Whether this NVRTC compiles for `target`.
    pub fn supports(&self, target: CudaTarget) -> bool {
        self.archs.contains(&target.sm)
    }

    /// Compiles `source` for `target`; returns the size of the PTX.
    ///
    /// # Errors
    /// NVRTC's log, and the source lines it names.
    pub fn compile(&self, source: &str, target: CudaTarget) -> Result<usize, CompileFailure> {
        let arch = format!("--gpu-architecture={}", target.nvrtc_arch());
        let include = format!("--include-path={}", self.include.display());
        let mut options = vec![arch, include, "-lineinfo".to_string()];
        let cccl = self.include.join("cccl");
        if cccl.is_dir() {
            options.push(format!("--include-path={}", cccl.display()));
        }
        let failure = |log: String| CompileFailure {
            excerpt: excerpt(source, &log),
            log,
        };
        let source_c =
            CString::new(source).map_err(|_| failure("a NUL byte in the source".into()))?;
        let program = result::create_program(&source_c, None)
            .map_err(|err| failure(format!("nvrtcCreateProgram: {err:?}")))?;
        // SAFETY: `program` is a live NVRTC program until destroyed below; the log and PTX
        // buffers are sized by NVRTC.
        unsafe {
            let outcome = match result::compile_program(program, &options) {
                Ok(()) => result::get_ptx(program)
                    .map(|ptx| ptx.len())
                    .map_err(|err| failure(format!("nvrtcGetPTX: {err:?}"))),
                Err(err) => {
                    let log = result::get_program_log(program)
                        .map(|raw| CStr::from_ptr(raw.as_ptr()).to_string_lossy().into_owned())
                        .unwrap_or_else(|_| format!("{err:?} (no log)"));
                    Err(failure(log))
                }
            };
            let _ = result::destroy_program(program);
            outcome
        }
    }
}

/// The numbered source lines an NVRTC log points at (`default_program(LINE): error: ...`),
/// two lines either side.
fn excerpt(source: &str, log: &str) -> String {
    let lines: Vec<&str> = source.lines().collect();
    let mut wanted: Vec<usize> = log
        .lines()
        .filter(|line| line.contains("error"))
        .filter_map(|line| {
            let open = line.find('(')?;
            let close = open + line[open..].find(')')?;
            line[open + 1..close].trim().parse::<usize>().ok()
        })
        .collect();
    wanted.sort_unstable();
    wanted.dedup();
    let mut out = String::new();
    for line in wanted.into_iter().take(3) {
        let (from, to) = (line.saturating_sub(2).max(1), (line + 2).min(lines.len()));
        for n in from..=to {
            let mark = if n == line { ">" } else { " " };
            if let Some(text) = lines.get(n - 1) {
                out.push_str(&format!("{mark}{n:5} | {text}\n"));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::excerpt;

    #[test]
    fn excerpt_numbers_the_lines_the_log_names() {
        let source = "a\nb\nc\nd\ne\nf";
        let log = "default_program(4): error: identifier \"x\" is undefined\n1 error detected";
        let text = excerpt(source, log);
        assert!(text.contains(">    4 | d"), "{text}");
        assert!(text.contains("     2 | b"), "{text}");
        assert!(text.contains("     6 | f"), "{text}");
        assert!(!text.contains("| a"), "{text}");
    }
}
