//! What every example that measures shares: the machine a figure was measured on (CPU
//! model with its 16-bit arithmetic flags, GPUs) and the date, and the writing of a
//! generated section between two markers of a Markdown file, so that a table there is always
//! the one its command last printed.

use std::path::Path;

/// The machine a run is on: the CPU model, cores, memory and OS, and the NVIDIA GPUs with
/// their driver when `nvidia-smi` answers.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .next()
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map(|kb| format!("{:.0} GiB", kb / 1024.0 / 1024.0))
        .unwrap_or_default();
    let host = format!(
        "{cpu} ({}), {cores} cores, {mem}; {} {}",
        cpu_flags(),
        std::env::consts::OS,
        std::env::consts::ARCH
    );
    let gpus = std::process::Command::new("nvidia-smi")
        .args(["--query-gpu=name,driver_version", "--format=csv,noheader"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .trim()
                .replace('\n', "; ")
        });
    match gpus {
        Some(gpus) => format!("GPU {gpus} (name, driver); host {host}"),
        None => host,
    }
}

/// The CPU's 16-bit arithmetic flags, present and absent, as every CPU figure must say.
pub fn cpu_flags() -> String {
    let flags: Vec<String> = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("flags")).map(|l| {
                l.split(':')
                    .nth(1)
                    .unwrap_or("")
                    .split_whitespace()
                    .map(String::from)
                    .collect()
            })
        })
        .unwrap_or_default();
    let wanted = [
        "avx512_bf16",
        "avx512_fp16",
        "amx_bf16",
        "avx512f",
        "avx2",
        "f16c",
    ];
    let (have, lacks): (Vec<&str>, Vec<&str>) =
        wanted.iter().partition(|f| flags.iter().any(|g| g == *f));
    format!(
        "has {}; lacks {}",
        if have.is_empty() {
            "none of them".into()
        } else {
            have.join(", ")
        },
        if lacks.is_empty() {
            "none".into()
        } else {
            lacks.join(", ")
        }
    )
}

pub fn date() -> String {
    std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// Puts `body` between the markers named `name` in the Markdown file at `path`, keeping
/// everything around them. The begin marker says which command wrote the section; a file
/// without the markers gets them appended (a missing file is created).
pub fn write_section(path: &Path, name: &str, command: &str, body: &str) -> std::io::Result<()> {
    let begin = format!("<!-- {name}:begin (written by `{command}`) -->");
    let end = format!("<!-- {name}:end -->");
    let old = std::fs::read_to_string(path).unwrap_or_default();
    let body = if body.ends_with('\n') {
        body.to_string()
    } else {
        format!("{body}\n")
    };
    let open = format!("<!-- {name}:begin");
    let text = match (old.find(&open), old.find(&end)) {
        (Some(b), Some(e)) if b < e => format!("{}{begin}\n{body}{}", &old[..b], &old[e..]),
        _ if old.is_empty() => format!("{begin}\n{body}{end}\n"),
        _ => format!("{}\n\n{begin}\n{body}{end}\n", old.trim_end()),
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, text)
}
