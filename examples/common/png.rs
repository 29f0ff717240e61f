//! The PNGs the examples draw, written with the best compression: plotters draws into an
//! RGB buffer and this encodes it (plotters' own writer is fast and large, and these
//! pictures are kept in the repository).

use std::path::Path;

use image::ImageEncoder;
use image::codecs::png::{CompressionType, FilterType, PngEncoder};

/// Writes `rgb` (`width x height` pixels, three bytes each) to `path` as a PNG, creating
/// its folder.
pub fn save(path: &Path, (width, height): (u32, u32), rgb: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let file = std::io::BufWriter::new(std::fs::File::create(path)?);
    PngEncoder::new_with_quality(file, CompressionType::Best, FilterType::Adaptive)
        .write_image(rgb, width, height, image::ColorType::Rgb8)
        .map_err(std::io::Error::other)
}
