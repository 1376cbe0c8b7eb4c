//! What the demo's and the experiment's figures share: SVG axes and frames drawn the same way,
//! text escaping, the output path check made before a run, and writing SVG or PNG (rasterised
//! with the system's fonts) by the file's extension.

use std::{fmt::Write as _, path::Path};

use anyhow::{Context as _, Result, bail};

/// Whether `path` names a format a figure can be written as, and can be written, checked before
/// anything runs (a run takes minutes; finding out at the end loses it).
pub(crate) fn check_path(path: &Path) -> Result<(), String> {
    match path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).as_deref() {
        Some("svg" | "png") => {}
        _ => return Err(format!("--plot {}: the file must end in .svg or .png", path.display())),
    }
    crate::newfile::check_writable(path).map_err(|why| format!("--plot {}: {why}", path.display()))
}

/// Writes `svg` to `path`, as SVG or PNG by its extension.
pub(crate) fn write(path: &Path, svg: &str) -> Result<()> {
    let bytes = if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("png")) {
        png(svg)?
    } else {
        svg.as_bytes().to_vec()
    };
    crate::newfile::write(path, &bytes, crate::newfile::PUBLIC).with_context(|| format!("writing {}", path.display()))
}

/// Rasterises an SVG figure to PNG with the system's fonts.
fn png(svg: &str) -> Result<Vec<u8>> {
    let mut opt = resvg::usvg::Options::default();
    opt.fontdb_mut().load_system_fonts();
    if opt.fontdb.is_empty() {
        crate::output::errln!(
            "bbrscope: warning: no system fonts found; the PNG has no labels (install fonts-dejavu-core, or use .svg)"
        );
    }
    let tree = resvg::usvg::Tree::from_str(svg, &opt).context("parsing the chart")?;
    let size = tree.size().to_int_size();
    let Some(mut pixmap) = resvg::tiny_skia::Pixmap::new(size.width(), size.height()) else {
        bail!("cannot allocate a {}x{} image", size.width(), size.height());
    };
    resvg::render(&tree, resvg::tiny_skia::Transform::default(), &mut pixmap.as_mut());
    pixmap.encode_png().context("encoding the PNG")
}

/// A plotting area: its left and top edges, width and height, in SVG units.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Area {
    pub(crate) x: f64,
    pub(crate) y: f64,
    pub(crate) w: f64,
    pub(crate) h: f64,
}

impl Area {
    /// A horizontal grid line at height `y`, labelled left of the area.
    pub(crate) fn y_tick(&self, s: &mut String, y: f64, label: &str) {
        let _ = writeln!(
            s,
            r##"<line x1="{:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#e5e5e5"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            self.x,
            self.x + self.w,
            self.x - 6.0,
            y + 4.0,
            escape(label)
        );
    }

    /// A vertical grid line at `x`, labelled below the area.
    pub(crate) fn x_tick(&self, s: &mut String, x: f64, label: &str) {
        let _ = writeln!(
            s,
            r##"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="#e5e5e5"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            self.y,
            self.y + self.h,
            self.y + self.h + 16.0,
            escape(label)
        );
    }

    /// The area's frame and its y-axis title, written vertically `title_dx` left of the area.
    pub(crate) fn frame(&self, s: &mut String, y_title: &str, title_dx: f64) {
        let (tx, ty) = (self.x - title_dx, self.y + self.h / 2.0);
        let _ = writeln!(
            s,
            r##"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="none" stroke="#444"/><text x="{tx:.1}" y="{ty:.1}" transform="rotate(-90 {tx:.1} {ty:.1})" text-anchor="middle">{}</text>"##,
            self.x,
            self.y,
            self.w,
            self.h,
            escape(y_title)
        );
    }
}

pub(crate) fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plot_that_cannot_be_written_is_refused_before_the_run() {
        let e = check_path(Path::new("/no/such/dir/x.png")).unwrap_err();
        assert!(e.contains("no directory /no/such/dir"), "{e}");
        let dir = std::env::temp_dir().join(format!("bbrscope-plot-check-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fresh = dir.join("x.svg");
        assert!(check_path(&fresh).is_ok());
        assert!(!fresh.exists(), "the check leaves no file behind");
        // An existing file is not truncated by the check.
        std::fs::write(&fresh, b"keep").unwrap();
        assert!(check_path(&fresh).is_ok());
        assert_eq!(std::fs::read(&fresh).unwrap(), b"keep");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn only_svg_and_png() {
        let dir = std::env::temp_dir();
        assert!(check_path(&dir.join(format!("bbrscope-{}.svg", std::process::id()))).is_ok());
        assert!(check_path(&dir.join(format!("bbrscope-{}.PNG", std::process::id()))).is_ok());
        assert!(check_path(Path::new("out.pdf")).is_err());
        assert!(check_path(Path::new("out")).is_err());
    }

    #[test]
    fn labels_are_escaped() {
        let mut s = String::new();
        Area { x: 10.0, y: 10.0, w: 100.0, h: 50.0 }.frame(&mut s, "a < b & c", 40.0);
        assert!(s.contains("a &lt; b &amp; c"), "{s}");
        assert!(
            resvg::usvg::Tree::from_str(
                &format!(r#"<svg xmlns="http://www.w3.org/2000/svg">{s}</svg>"#),
                &Default::default()
            )
            .is_ok()
        );
    }
}
