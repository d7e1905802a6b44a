//! PNG charts drawn by the tool itself with `plotters`.
//!
//! Text is rasterised in pure Rust (`ab_glyph`) from a TrueType font read at
//! run time, so nothing links fontconfig or freetype. The font is DejaVu Sans
//! from Debian's `fonts-dejavu-core` package (or the file named by
//! [`FONT_ENV`]); [`ensure_font`] finds and registers it once per process.
//!
//! Axes are drawn by one small coordinate type (`Axis`) that maps values on
//! a linear, log10 or log2 scale and chooses its own ticks, so tick labels are
//! always round numbers ("64", "1,024", "2k", "5k").

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{bail, Context as _};
use plotters::coord::ranged1d::{KeyPointHint, NoDefaultFormatting, Ranged, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::FontStyle;

/// One bar group of the main suite chart.
#[derive(Debug, Clone)]
pub struct SuiteBar {
    /// Row label (plus integrity/pattern qualifiers).
    pub label: String,
    /// Effective MB/s.
    pub effective_mb_s: f64,
    /// Effective MB per CPU-second.
    pub mb_per_cpu_s: f64,
    /// Effective MB.
    pub effective_mb: f64,
    /// Wire MB.
    pub wire_mb: f64,
}

/// One line of a line chart.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend name.
    pub name: String,
    /// (x, y) points in x order.
    pub points: Vec<(f64, f64)>,
}

/// Environment variable naming a `.ttf`/`.otf` file to draw chart text with,
/// instead of the DejaVu Sans that [`ensure_font`] looks for.
pub const FONT_ENV: &str = "PFS_PLOT_FONT";

/// The Debian package that provides the default chart font.
pub const FONT_PACKAGE: &str = "fonts-dejavu-core";

/// (regular, bold) font files tried in order. The first is Debian/Ubuntu's
/// `fonts-dejavu-core`; the others are the same font on Arch and Fedora, then
/// Debian's `fonts-liberation` as a last resort.
const FONT_FILES: &[(&str, &str)] = &[
    (
        "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf",
    ),
    (
        "/usr/share/fonts/TTF/DejaVuSans.ttf",
        "/usr/share/fonts/TTF/DejaVuSans-Bold.ttf",
    ),
    (
        "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
        "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans-Bold.ttf",
    ),
    (
        "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
        "/usr/share/fonts/truetype/liberation/LiberationSans-Bold.ttf",
    ),
];

/// The family name every text style below asks for.
const FAMILY: &str = "sans-serif";

/// Finds a font for chart text and registers it with `plotters` (once per
/// process). Fails with an error naming the package to install when no font
/// file is present.
pub fn ensure_font() -> anyhow::Result<&'static Path> {
    static FONT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match FONT.get_or_init(load_font) {
        Ok(path) => Ok(path),
        Err(msg) => bail!("{msg}"),
    }
}

fn load_font() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os(FONT_ENV) {
        let path = PathBuf::from(path);
        return register(&path, FontStyle::Normal)
            .map(|()| path)
            .map_err(|e| format!("{FONT_ENV} names no usable font: {e}"));
    }
    for (regular, bold) in FONT_FILES {
        let regular = Path::new(regular);
        if register(regular, FontStyle::Normal).is_ok() {
            // Without a bold face, titles fall back to the regular one.
            let _ = register(Path::new(bold), FontStyle::Bold);
            return Ok(regular.to_path_buf());
        }
    }
    Err(format!(
        "no font to draw chart text with: install the Debian package {FONT_PACKAGE} \
         (`apt-get install {FONT_PACKAGE}`) or set {FONT_ENV} to a .ttf file \
         (looked for {})",
        FONT_FILES[0].0
    ))
}

fn register(path: &Path, style: FontStyle) -> Result<(), String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    // `register_font` keeps a `&'static` borrow; each face is read at most
    // once per process (behind `ensure_font`'s `OnceLock`), so leaking is fine.
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    plotters::style::register_font(FAMILY, style, bytes)
        .map_err(|_| format!("{}: not a usable TrueType/OpenType font", path.display()))
}

// ---------------------------------------------------------------------------
// Look.

const TITLE_PX: f64 = 28.0;
const CAPTION_PX: f64 = 20.0;
const DESC_PX: f64 = 17.0;
const TICK_PX: f64 = 15.0;
const LABEL_PX: f64 = 16.0;
const NOTE_PX: f64 = 14.0;

/// Okabe–Ito colours (distinguishable with common colour-vision deficiencies).
const PALETTE: &[RGBColor] = &[
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(0, 0, 0),
    RGBColor(240, 228, 66),
];
const TEXT: RGBColor = RGBColor(30, 30, 30);
const GRID_BOLD: RGBColor = RGBColor(200, 200, 200);
const GRID_LIGHT: RGBColor = RGBColor(235, 235, 235);

fn font(px: f64) -> FontDesc<'static> {
    FontDesc::new(FontFamily::Name(FAMILY), px, FontStyle::Normal)
}

fn text(px: f64) -> TextStyle<'static> {
    font(px).color(&TEXT)
}

/// Width in pixels of `s` drawn at `px` (a rough guess if the font fails).
fn text_width(s: &str, px: f64) -> u32 {
    font(px)
        .box_size(s)
        .map(|(w, _)| w)
        .unwrap_or_else(|_| (s.chars().count() as f64 * px * 0.6) as u32)
}

/// `DrawingAreaErrorKind` borrows nothing but is not always `Sync`; keep its text.
fn draw_err<E: std::fmt::Display>(e: E) -> anyhow::Error {
    anyhow::anyhow!("drawing the chart: {e}")
}

// ---------------------------------------------------------------------------
// Axis: one coordinate type for linear, log10 and log2 scales.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scale {
    Linear,
    Log10,
    Log2,
}

/// A value axis from `lo` to `hi` with precomputed ticks. Values are given in
/// data units; `map` applies the scale.
#[derive(Debug, Clone)]
struct Axis {
    scale: Scale,
    lo: f64,
    hi: f64,
    /// Labelled ticks with bold grid lines.
    major: Vec<f64>,
    /// Unlabelled light grid lines.
    minor: Vec<f64>,
    /// Decimal places of linear tick labels.
    decimals: usize,
}

impl Axis {
    /// Linear axis over `lo..hi` with about one label per 90 px of `px`.
    fn linear(lo: f64, hi: f64, px: f64) -> Self {
        let (lo, hi) = widen(lo, hi);
        let target = (px / 90.0).clamp(2.0, 12.0);
        let step = nice_step((hi - lo) / target);
        let ticks = |step: f64| -> Vec<f64> {
            let first = (lo / step - 1e-9).ceil() as i64;
            let last = (hi / step + 1e-9).floor() as i64;
            (first..=last).map(|k| k as f64 * step).collect()
        };
        let major = ticks(step);
        let minor = ticks(step / 2.0)
            .into_iter()
            .filter(|v| !major.iter().any(|m| (m - v).abs() < step * 1e-6))
            .collect();
        Self {
            scale: Scale::Linear,
            lo,
            hi,
            major,
            minor,
            decimals: decimals_for(step),
        }
    }

    /// Log10 axis over `lo..hi` (both > 0); mantissas 1-2-5 when they fit.
    fn log10(lo: f64, hi: f64, px: f64) -> Self {
        let (a, b) = (lo.log10(), hi.log10());
        let px_per_decade = px / (b - a).max(1e-9);
        let (mantissas, every): (&[f64], i64) = if px_per_decade >= 330.0 {
            (&[1.0, 2.0, 3.0, 5.0], 1)
        } else if px_per_decade >= 150.0 {
            (&[1.0, 2.0, 5.0], 1)
        } else {
            (&[1.0], (70.0 / px_per_decade).ceil().max(1.0) as i64)
        };
        let mut major = Vec::new();
        let mut minor = Vec::new();
        for e in (a.floor() as i64)..=(b.ceil() as i64) {
            let decade = 10f64.powi(e as i32);
            for m in 1..=9 {
                let v = decade * f64::from(m);
                if v < lo * (1.0 - 1e-9) || v > hi * (1.0 + 1e-9) {
                    continue;
                }
                if mantissas.contains(&f64::from(m)) && e.rem_euclid(every) == 0 {
                    major.push(v);
                } else if px_per_decade >= 60.0 {
                    minor.push(v);
                }
            }
        }
        Self {
            scale: Scale::Log10,
            lo,
            hi,
            major,
            minor,
            decimals: 0,
        }
    }

    /// Log2 axis over `lo..hi` (both > 0), a label at powers of two.
    fn log2(lo: f64, hi: f64, px: f64) -> Self {
        let (a, b) = (lo.log2(), hi.log2());
        let px_per_octave = px / (b - a).max(1e-9);
        let every = (70.0 / px_per_octave).ceil().max(1.0) as i64;
        let mut major = Vec::new();
        let mut minor = Vec::new();
        for e in (a.ceil() as i64)..=(b.floor() as i64) {
            let v = 2f64.powi(e as i32);
            if e.rem_euclid(every) == 0 {
                major.push(v);
            } else {
                minor.push(v);
            }
        }
        Self {
            scale: Scale::Log2,
            lo,
            hi,
            major,
            minor,
            decimals: 0,
        }
    }

    fn is_log(&self) -> bool {
        self.scale != Scale::Linear
    }

    /// Position of `v` in 0..=1 along the axis (clamped).
    fn fraction(&self, v: f64) -> f64 {
        let t = |v: f64| match self.scale {
            Scale::Linear => v,
            Scale::Log10 => v.log10(),
            Scale::Log2 => v.log2(),
        };
        let (a, b) = (t(self.lo), t(self.hi));
        let x = t(v);
        if !x.is_finite() {
            return if x > 0.0 { 1.0 } else { 0.0 };
        }
        ((x - a) / (b - a)).clamp(-0.05, 1.05)
    }

    fn label(&self, v: f64) -> String {
        match self.scale {
            Scale::Linear => group_thousands(v, self.decimals),
            Scale::Log10 => compact(v),
            Scale::Log2 => group_thousands(v, if v < 1.0 { 3 } else { 0 }),
        }
    }
}

impl Ranged for Axis {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let span = f64::from(limit.1 - limit.0);
        limit.0 + (self.fraction(*value) * span).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.max_num_points() == 0 {
            Vec::new()
        } else if hint.weight().allow_light_points() {
            self.minor.clone()
        } else {
            self.major.clone()
        }
    }

    fn range(&self) -> Range<f64> {
        self.lo..self.hi
    }
}

impl ValueFormatter<f64> for Axis {
    fn format_ext(&self, value: &f64) -> String {
        self.label(*value)
    }
}

/// Vertical coordinate of a bar chart: `n` rows of height 1, row 0 on top.
/// Its key points are the row centres, where the row labels go.
#[derive(Debug, Clone, Copy)]
struct Rows(usize);

impl Rows {
    fn bottom(self, row: usize) -> f64 {
        (self.0 - row - 1) as f64
    }

    fn center(self, row: usize) -> f64 {
        self.bottom(row) + 0.5
    }

    /// The row whose centre is at `y`.
    fn at(self, y: f64) -> Option<usize> {
        let from_bottom = y.floor();
        (from_bottom >= 0.0 && from_bottom < self.0 as f64).then(|| self.0 - 1 - from_bottom as usize)
    }
}

impl Ranged for Rows {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let span = f64::from(limit.1 - limit.0);
        limit.0 + (value / self.0.max(1) as f64 * span).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.max_num_points() == 0 || hint.weight().allow_light_points() {
            Vec::new()
        } else {
            (0..self.0).map(|row| self.center(row)).collect()
        }
    }

    fn range(&self) -> Range<f64> {
        0.0..self.0 as f64
    }
}

impl ValueFormatter<f64> for Rows {
    fn format_ext(&self, _value: &f64) -> String {
        String::new()
    }
}

/// Makes `lo..hi` non-empty.
fn widen(lo: f64, hi: f64) -> (f64, f64) {
    if hi > lo {
        (lo, hi)
    } else {
        let pad = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
        (lo - pad, hi + pad)
    }
}

/// 1, 2, 2.5 or 5 times a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    let mag = 10f64.powf(raw.log10().floor());
    let norm = raw / mag;
    let m = [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .find(|&m| norm <= m + 1e-9)
        .unwrap_or(10.0);
    m * mag
}

/// Decimal places needed to print multiples of `step` exactly.
fn decimals_for(step: f64) -> usize {
    (0..=6)
        .find(|&d| {
            let scaled = step * 10f64.powi(d);
            (scaled - scaled.round()).abs() < 1e-6 * scaled.abs().max(1.0)
        })
        .unwrap_or(6) as usize
}

/// `1234567.8` with 1 decimal → `"1,234,567.8"`.
fn group_thousands(v: f64, decimals: usize) -> String {
    let s = format!("{:.*}", decimals, v.abs());
    let (int, frac) = s.split_once('.').map_or((s.as_str(), ""), |(i, f)| (i, f));
    let mut out = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if !frac.is_empty() {
        out.push('.');
        out.push_str(frac);
    }
    if v < 0.0 && s.chars().any(|c| c.is_ascii_digit() && c != '0') {
        out.insert(0, '-');
    }
    out
}

/// Short tick label: 500, 2k, 1.5M, 0.2.
fn compact(v: f64) -> String {
    let (scaled, suffix) = match v.abs() {
        a if a >= 1e9 => (v / 1e9, "G"),
        a if a >= 1e6 => (v / 1e6, "M"),
        a if a >= 1e3 => (v / 1e3, "k"),
        _ => (v, ""),
    };
    format!("{}{suffix}", significant(scaled, 3))
}

/// `v` with at most `digits` significant digits, trailing zeros dropped.
fn significant(v: f64, digits: i32) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let magnitude = v.abs().log10().floor() as i32;
    let decimals = (digits - 1 - magnitude).max(0) as usize;
    let s = format!("{v:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// A rate: `15,234`, `842`, `12.5`, `0.75`.
fn rate(v: f64) -> String {
    let decimals = if v >= 100.0 {
        0
    } else if v >= 10.0 {
        1
    } else {
        2
    };
    group_thousands(v, decimals)
}

/// Decimal megabytes as a readable size: `1.47 MB`, `4.1 GB`, `880 B`.
fn size_from_mb(mb: f64) -> String {
    let bytes = mb * 1e6;
    let (v, unit) = match bytes {
        b if b >= 1e12 => (b / 1e12, "TB"),
        b if b >= 1e9 => (b / 1e9, "GB"),
        b if b >= 1e6 => (b / 1e6, "MB"),
        b if b >= 1e3 => (b / 1e3, "kB"),
        b => (b, "B"),
    };
    format!("{} {unit}", significant(v, 3))
}

/// Wire bytes over effective bytes: `1.02×`, `0.00036×`, `2.1e-6×`.
fn ratio(wire_mb: f64, effective_mb: f64) -> String {
    if !(effective_mb.is_finite() && effective_mb > 0.0 && wire_mb.is_finite()) {
        return "n/a".to_string();
    }
    let r = wire_mb / effective_mb;
    if r == 0.0 || r >= 1e-4 {
        format!("{}×", significant(r, 3))
    } else {
        format!("{r:.1e}×")
    }
}

// ---------------------------------------------------------------------------
// Suite bar chart.

/// Bar chart of effective MB/s and MB/CPU-s per label, wire bytes annotated.
///
/// Two panels share the row labels: effective MB/s (each bar annotated with
/// the wire bytes and wire/effective ratio) and effective MB per CPU-second.
/// Rows with no effective throughput (skipped or failed) are left out. An
/// axis switches to log scale when its values span more than 10×, and says so.
pub fn suite_bars(bars: &[SuiteBar], title: &str, path: &Path) -> anyhow::Result<()> {
    let rows: Vec<&SuiteBar> = bars
        .iter()
        .filter(|b| b.effective_mb_s.is_finite() && b.effective_mb_s > 0.0)
        .collect();
    if rows.is_empty() {
        bail!("nothing to plot: no row has a non-zero effective MB/s");
    }
    ensure_font()?;

    let n = rows.len();
    let label_w = rows
        .iter()
        .map(|b| text_width(&b.label, LABEL_PX))
        .max()
        .unwrap_or(0)
        + 20;
    let width = 1600.max(label_w + 1180);
    let row_px = 46;
    let height = 900.max(200 + row_px * n as u32);

    // Pixel budget of each panel's plotting area (approximate: margins).
    let split = label_w + (width - label_w) * 58 / 100;
    let left_plot_px = f64::from(split - label_w - 40);
    let right_plot_px = f64::from(width - split - 50);

    let speed: Vec<String> = rows
        .iter()
        .map(|b| {
            format!(
                "{} MB/s · wire {} ({})",
                rate(b.effective_mb_s),
                size_from_mb(b.wire_mb),
                ratio(b.wire_mb, b.effective_mb)
            )
        })
        .collect();
    let cpu_ok = |b: &SuiteBar| b.mb_per_cpu_s.is_finite() && b.mb_per_cpu_s > 0.0;
    let per_cpu: Vec<String> = rows
        .iter()
        .map(|b| {
            if cpu_ok(b) {
                rate(b.mb_per_cpu_s)
            } else {
                "n/a".to_string()
            }
        })
        .collect();

    let speed_axis = bar_axis(rows.iter().map(|b| b.effective_mb_s), &speed, left_plot_px);
    let cpu_axis = bar_axis(
        rows.iter().filter(|b| cpu_ok(b)).map(|b| b.mb_per_cpu_s),
        &per_cpu,
        right_plot_px,
    );

    let root = BitMapBackend::new(path, (width, height)).into_drawing_area();
    root.fill(&WHITE).map_err(draw_err)?;
    let body = title_band(&root, title)?;
    let (body, note) = body.split_vertically(body.dim_in_pixel().1 - 30);
    note.draw_text(
        "Left bars: effective MB/s, then bytes on the wire and wire ÷ effective bytes. \
         Right bars: effective MB per CPU-second (user + system; n/a when not measured). \
         Skipped rows are not shown.",
        &text(NOTE_PX).color(&RGBColor(90, 90, 90)),
        (20, 6),
    )
    .map_err(draw_err)?;

    let (left, right) = body.split_horizontally(split);
    let rows_desc: Vec<&str> = rows.iter().map(|b| b.label.as_str()).collect();
    draw_bar_panel(
        &left,
        "Effective throughput",
        &format!("effective MB/s{}", scale_note(&speed_axis)),
        speed_axis,
        rows.iter().map(|b| Some(b.effective_mb_s)).collect(),
        &speed,
        Some(&rows_desc),
        label_w,
        PALETTE[0],
    )?;
    draw_bar_panel(
        &right,
        "CPU efficiency",
        &format!("effective MB per CPU-second{}", scale_note(&cpu_axis)),
        cpu_axis,
        rows.iter().map(|b| cpu_ok(b).then_some(b.mb_per_cpu_s)).collect(),
        &per_cpu,
        None,
        0,
        PALETTE[1],
    )?;

    root.present()
        .map_err(draw_err)
        .with_context(|| format!("writing {}", path.display()))
}

/// Draws `title` centred in a band at the top of `area`; returns the rest.
///
/// (`DrawingArea::titled` puts `ab_glyph` text a few pixels too high, which
/// clips a title at the image edge.)
fn title_band<'a>(
    area: &DrawingArea<BitMapBackend<'a>, Shift>,
    title: &str,
) -> anyhow::Result<DrawingArea<BitMapBackend<'a>, Shift>> {
    let band = (TITLE_PX * 2.2) as u32;
    let (top, rest) = area.split_vertically(band);
    // `FontDesc::style` keeps the old face; build the bold one directly.
    let style = FontDesc::new(FontFamily::Name(FAMILY), TITLE_PX, FontStyle::Bold)
        .color(&TEXT)
        .pos(Pos::new(HPos::Center, VPos::Center));
    let (w, _) = top.dim_in_pixel();
    top.draw_text(title, &style, ((w / 2) as i32, (band * 6 / 10) as i32))
        .map_err(draw_err)?;
    Ok(rest)
}

fn scale_note(axis: &Axis) -> &'static str {
    if axis.is_log() {
        " (log scale)"
    } else {
        ""
    }
}

/// Axis for bars with `values`, leaving room right of the longest bar for
/// the widest annotation in `notes`.
fn bar_axis(values: impl Iterator<Item = f64>, notes: &[String], plot_px: f64) -> Axis {
    let (min, max) = values.fold((f64::INFINITY, 0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if max <= 0.0 {
        return Axis::linear(0.0, 1.0, plot_px);
    }
    let note_px = notes
        .iter()
        .map(|s| text_width(s, LABEL_PX - 1.0))
        .max()
        .unwrap_or(0);
    // Fraction of the width the longest bar may take.
    let bar_frac = (1.0 - (f64::from(note_px) + 16.0) / plot_px).clamp(0.3, 0.92);
    if max / min > 10.0 {
        let lo = 10f64.powf((min * 0.5).log10().floor());
        let hi = 10f64.powf(lo.log10() + (max.log10() - lo.log10()) / bar_frac);
        Axis::log10(lo, hi, plot_px)
    } else {
        Axis::linear(0.0, max / bar_frac, plot_px)
    }
}

/// One panel of horizontal bars, first row at the top. `values[i]` of `None`
/// draws no bar, only the note.
#[allow(clippy::too_many_arguments)]
fn draw_bar_panel(
    area: &DrawingArea<BitMapBackend<'_>, Shift>,
    caption: &str,
    x_desc: &str,
    axis: Axis,
    values: Vec<Option<f64>>,
    notes: &[String],
    labels: Option<&[&str]>,
    label_w: u32,
    color: RGBColor,
) -> anyhow::Result<()> {
    let rows = Rows(values.len());
    let mut chart = ChartBuilder::on(area)
        .caption(caption, text(CAPTION_PX))
        .margin_top(10)
        .margin_bottom(6)
        .margin_left(if labels.is_some() { 10 } else { 6 })
        .margin_right(30)
        .x_label_area_size(64)
        .y_label_area_size(label_w)
        .build_cartesian_2d(axis.clone(), rows)
        .map_err(draw_err)?;

    let row_label = |y: &f64| {
        rows.at(*y)
            .and_then(|row| labels?.get(row))
            .map_or_else(String::new, |s| s.to_string())
    };
    let x_label = |v: &f64| axis.label(*v);
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(rows.0)
        .y_label_formatter(&row_label)
        .x_label_formatter(&x_label)
        .x_desc(x_desc)
        .label_style(text(TICK_PX))
        .y_label_style(text(LABEL_PX))
        .axis_desc_style(text(DESC_PX))
        .bold_line_style(GRID_BOLD)
        .light_line_style(GRID_LIGHT)
        .axis_style(RGBColor(120, 120, 120))
        .draw()
        .map_err(draw_err)?;

    let base = axis.lo;
    // Bars fill about 64% of their row, and are at most 60 px thick.
    let row_px = chart.plotting_area().dim_in_pixel().1 / rows.0.max(1) as u32;
    let gap = (row_px * 18 / 100).max(row_px.saturating_sub(60) / 2).max(3);
    chart
        .draw_series(values.iter().enumerate().filter_map(|(i, v)| {
            let v = (*v)?;
            let mut bar = Rectangle::new(
                [(base, rows.bottom(i)), (v, rows.bottom(i) + 1.0)],
                color.filled(),
            );
            bar.set_margin(gap, gap, 0, 0);
            Some(bar)
        }))
        .map_err(draw_err)?;

    let note_style = text(LABEL_PX - 1.0).pos(Pos::new(HPos::Left, VPos::Center));
    chart
        .draw_series(values.iter().zip(notes).enumerate().map(|(i, (v, note))| {
            let x = v.unwrap_or(base);
            EmptyElement::at((x, rows.center(i))) + Text::new(note.clone(), (8, 0), note_style.clone())
        }))
        .map_err(draw_err)?;
    Ok(())
}

// ---------------------------------------------------------------------------
// Line chart.

/// Line chart, optionally with a log2 x axis.
///
/// Each series gets a colour, a marker shape and a legend entry; the legend
/// goes in the corner with the fewest data points under it. The y axis runs
/// from 0 (or the lowest negative value) to 110% of the highest value, or is
/// log10 when all values are positive and span more than 100×; the axis label
/// says so. With `log_x`, points with x ≤ 0 cannot be shown and are dropped.
pub fn lines(
    series: &[Series],
    title: &str,
    x_label: &str,
    y_label: &str,
    log_x: bool,
    path: &Path,
) -> anyhow::Result<()> {
    let series: Vec<(&str, Vec<(f64, f64)>)> = series
        .iter()
        .map(|s| {
            let points = s
                .points
                .iter()
                .copied()
                .filter(|(x, y)| x.is_finite() && y.is_finite() && (!log_x || *x > 0.0))
                .collect();
            (s.name.as_str(), points)
        })
        .collect();
    let all: Vec<(f64, f64)> = series.iter().flat_map(|(_, p)| p.iter().copied()).collect();
    if all.is_empty() {
        bail!("nothing to plot: no series has a point");
    }
    ensure_font()?;

    let (width, height) = (1600u32, 900u32);
    let y_area = 110u32;
    let plot_w = f64::from(width - y_area - 60);
    let plot_h = f64::from(height) - 190.0;

    let (x_min, x_max) = min_max(all.iter().map(|p| p.0));
    let (y_min, y_max) = min_max(all.iter().map(|p| p.1));
    let x_axis = if log_x {
        let pad = 2f64.powf(0.3);
        Axis::log2(x_min / pad, x_max * pad, plot_w)
    } else {
        let (lo, hi) = widen(x_min, x_max);
        let pad = (hi - lo) * 0.02;
        Axis::linear(lo - pad, hi + pad, plot_w)
    };
    let y_axis = if y_min > 0.0 && y_max / y_min > 100.0 {
        Axis::log10(y_min / 1.5, y_max * 1.5, plot_h)
    } else {
        let lo = if y_min < 0.0 { y_min * 1.1 } else { 0.0 };
        let hi = if y_max > 0.0 { y_max * 1.1 } else { 0.0 };
        Axis::linear(lo, hi, plot_h)
    };

    let root = BitMapBackend::new(path, (width, height)).into_drawing_area();
    root.fill(&WHITE).map_err(draw_err)?;
    let body = title_band(&root, title)?;
    let mut chart = ChartBuilder::on(&body)
        .margin(20)
        .margin_top(6)
        .margin_right(40)
        .x_label_area_size(70)
        .y_label_area_size(y_area)
        .build_cartesian_2d(x_axis.clone(), y_axis.clone())
        .map_err(draw_err)?;

    let x_fmt = |v: &f64| x_axis.label(*v);
    let y_fmt = |v: &f64| y_axis.label(*v);
    chart
        .configure_mesh()
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .x_desc(format!("{x_label}{}", scale_note_base(&x_axis)))
        .y_desc(format!("{y_label}{}", scale_note_base(&y_axis)))
        .label_style(text(TICK_PX))
        .axis_desc_style(text(DESC_PX))
        .bold_line_style(GRID_BOLD)
        .light_line_style(GRID_LIGHT)
        .axis_style(RGBColor(120, 120, 120))
        .draw()
        .map_err(draw_err)?;

    for (i, (name, points)) in series.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let line = color.stroke_width(3);
        chart
            .draw_series(LineSeries::new(points.iter().copied(), line))
            .map_err(draw_err)?
            .label(*name)
            .legend(move |(x, y)| {
                EmptyElement::at((x + 14, y))
                    + PathElement::new(vec![(-14, 0), (14, 0)], line)
                    + marker(i, color)
            });
        chart
            .draw_series(points.iter().map(|&p| EmptyElement::at(p) + marker(i, color)))
            .map_err(draw_err)?;
    }

    let legend_w = series
        .iter()
        .map(|(name, _)| text_width(name, LABEL_PX))
        .max()
        .unwrap_or(0);
    let legend = (
        (f64::from(legend_w) + 80.0) / plot_w,
        (series.len() as f64 * 24.0 + 30.0) / plot_h,
    );
    chart
        .configure_series_labels()
        .position(legend_corner(&series, &x_axis, &y_axis, legend))
        .margin(12)
        .legend_area_size(40)
        .label_font(text(LABEL_PX))
        .background_style(WHITE.mix(0.9))
        .border_style(RGBColor(160, 160, 160))
        .draw()
        .map_err(draw_err)?;

    root.present()
        .map_err(draw_err)
        .with_context(|| format!("writing {}", path.display()))
}

fn scale_note_base(axis: &Axis) -> &'static str {
    match axis.scale {
        Scale::Linear => "",
        Scale::Log10 => " (log scale)",
        Scale::Log2 => " (log₂ scale)",
    }
}

fn min_max(values: impl Iterator<Item = f64>) -> (f64, f64) {
    values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    })
}

/// A filled marker centred on (0, 0): circle, square, triangle, diamond.
fn marker(i: usize, color: RGBColor) -> Polygon<(i32, i32)> {
    let points: Vec<(i32, i32)> = match i % 4 {
        0 => (0..16)
            .map(|k| {
                let a = f64::from(k) * std::f64::consts::TAU / 16.0;
                ((6.0 * a.cos()).round() as i32, (6.0 * a.sin()).round() as i32)
            })
            .collect(),
        1 => vec![(-5, -5), (5, -5), (5, 5), (-5, 5)],
        2 => vec![(0, -7), (6, 5), (-6, 5)],
        _ => vec![(0, -7), (7, 0), (0, 7), (-7, 0)],
    };
    Polygon::new(points, color.filled())
}

/// The corner whose legend-sized box (`size` as fractions of the plot) covers
/// the fewest points and line samples; upper left wins ties.
fn legend_corner(
    series: &[(&str, Vec<(f64, f64)>)],
    x: &Axis,
    y: &Axis,
    size: (f64, f64),
) -> SeriesLabelPosition {
    let mut samples = Vec::new();
    for (_, points) in series {
        let norm: Vec<(f64, f64)> = points
            .iter()
            .map(|&(px, py)| (x.fraction(px), y.fraction(py)))
            .collect();
        samples.extend(norm.iter().copied());
        for w in norm.windows(2) {
            for k in 1..16 {
                let t = f64::from(k) / 16.0;
                samples.push((w[0].0 + (w[1].0 - w[0].0) * t, w[0].1 + (w[1].1 - w[0].1) * t));
            }
        }
    }
    let (w, h) = (size.0 + 0.02, size.1 + 0.02);
    let corners = [
        (SeriesLabelPosition::UpperLeft, 0.0..w, 1.0 - h..1.1),
        (SeriesLabelPosition::UpperRight, 1.0 - w..1.1, 1.0 - h..1.1),
        (SeriesLabelPosition::LowerRight, 1.0 - w..1.1, -0.1..h),
        (SeriesLabelPosition::LowerLeft, -0.1..w, -0.1..h),
    ];
    corners
        .into_iter()
        .min_by_key(|(_, xr, yr)| {
            samples
                .iter()
                .filter(|(sx, sy)| xr.contains(sx) && yr.contains(sy))
                .count()
        })
        .map_or(SeriesLabelPosition::UpperLeft, |(pos, _, _)| pos)
}

// ---------------------------------------------------------------------------
// Dot chart.

/// One row of a dot chart.
#[derive(Debug, Clone)]
pub struct DotRow {
    /// Row label.
    pub label: String,
    /// One value per statistic, in the chart's statistic order (`None`: not measured).
    pub values: Vec<Option<f64>>,
}

/// Horizontal dot chart on a log10 value axis, for distributions side by
/// side (e.g. latency p50, mean, p99, p99.9 per method).
///
/// One row per label, first on top; one marker per statistic, its shape and
/// colour named in a legend above the plot; a grey line joins a row's
/// smallest and largest value, and the values are written right of it with
/// `unit`. Values that are not positive cannot be shown on a log axis and are
/// left out; rows without any value are dropped.
pub fn dots(
    rows: &[DotRow],
    stats: &[&str],
    title: &str,
    x_label: &str,
    unit: &str,
    path: &Path,
) -> anyhow::Result<()> {
    let rows: Vec<(&str, Vec<Option<f64>>)> = rows
        .iter()
        .map(|r| {
            let values = r
                .values
                .iter()
                .map(|v| v.filter(|x| x.is_finite() && *x > 0.0))
                .collect();
            (r.label.as_str(), values)
        })
        .filter(|(_, v): &(&str, Vec<Option<f64>>)| v.iter().any(Option::is_some))
        .collect();
    if rows.is_empty() {
        bail!("nothing to plot: no row has a positive value");
    }
    ensure_font()?;

    let n = rows.len();
    let notes: Vec<String> = rows
        .iter()
        .map(|(_, values)| {
            let parts: Vec<String> = stats
                .iter()
                .zip(values)
                .filter_map(|(s, v)| v.map(|v| format!("{s} {}", compact(v))))
                .collect();
            format!("{} {unit}", parts.join(" · "))
        })
        .collect();
    let label_w = rows
        .iter()
        .map(|(l, _)| text_width(l, LABEL_PX))
        .max()
        .unwrap_or(0)
        + 20;
    let width = 1600.max(label_w + 1100);
    let row_px = 70;
    let height = 420.max(240 + row_px * n as u32);
    let plot_px = f64::from(width - label_w - 70);

    // At least one decade, and room right of the largest value for the widest note.
    let (lo, hi) = min_max(rows.iter().flat_map(|(_, v)| v.iter().flatten().copied()));
    let note_px = notes
        .iter()
        .map(|s| text_width(s, LABEL_PX - 1.0))
        .max()
        .unwrap_or(0);
    let frac = (1.0 - (f64::from(note_px) + 30.0) / plot_px).clamp(0.3, 0.9);
    let a = (lo / 1.5).log10().floor();
    let b = (hi * 1.2).log10().max(a + 1.0);
    let axis = Axis::log10(10f64.powf(a), 10f64.powf(a + (b - a) / frac), plot_px);

    let root = BitMapBackend::new(path, (width, height)).into_drawing_area();
    root.fill(&WHITE).map_err(draw_err)?;
    let body = title_band(&root, title)?;
    let (legend, body) = body.split_vertically(40);
    let mut x = i32::try_from(label_w).unwrap_or(200) + 20;
    let legend_style = text(LABEL_PX).pos(Pos::new(HPos::Left, VPos::Center));
    for (k, stat) in stats.iter().enumerate() {
        let color = PALETTE[k % PALETTE.len()];
        legend
            .draw(&(EmptyElement::at((x, 20)) + marker(k, color)))
            .map_err(draw_err)?;
        legend
            .draw_text(stat, &legend_style, (x + 14, 20))
            .map_err(draw_err)?;
        x += 40 + i32::try_from(text_width(stat, LABEL_PX)).unwrap_or(60);
    }

    let grid = Rows(n);
    let mut chart = ChartBuilder::on(&body)
        .margin(20)
        .margin_top(6)
        .margin_right(40)
        .x_label_area_size(70)
        .y_label_area_size(label_w)
        .build_cartesian_2d(axis.clone(), grid)
        .map_err(draw_err)?;
    let row_label = |y: &f64| {
        grid.at(*y)
            .and_then(|row| rows.get(row))
            .map_or_else(String::new, |(l, _)| l.to_string())
    };
    let x_fmt = |v: &f64| axis.label(*v);
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(n)
        .y_label_formatter(&row_label)
        .x_label_formatter(&x_fmt)
        .x_desc(format!("{x_label}{}", scale_note_base(&axis)))
        .label_style(text(TICK_PX))
        .y_label_style(text(LABEL_PX))
        .axis_desc_style(text(DESC_PX))
        .bold_line_style(GRID_BOLD)
        .light_line_style(GRID_LIGHT)
        .axis_style(RGBColor(120, 120, 120))
        .draw()
        .map_err(draw_err)?;

    let span = |v: &[Option<f64>]| min_max(v.iter().flatten().copied());
    chart
        .draw_series(rows.iter().enumerate().map(|(i, (_, v))| {
            let (a, b) = span(v);
            PathElement::new(
                vec![(a, grid.center(i)), (b, grid.center(i))],
                RGBColor(150, 150, 150).stroke_width(2),
            )
        }))
        .map_err(draw_err)?;
    for k in 0..stats.len() {
        let color = PALETTE[k % PALETTE.len()];
        chart
            .draw_series(rows.iter().enumerate().filter_map(|(i, (_, v))| {
                let x = v.get(k).copied().flatten()?;
                Some(EmptyElement::at((x, grid.center(i))) + marker(k, color))
            }))
            .map_err(draw_err)?;
    }
    let note_style = text(LABEL_PX - 1.0).pos(Pos::new(HPos::Left, VPos::Center));
    chart
        .draw_series(rows.iter().zip(&notes).enumerate().map(|(i, ((_, v), note))| {
            EmptyElement::at((span(v).1, grid.center(i)))
                + Text::new(note.clone(), (16, 0), note_style.clone())
        }))
        .map_err(draw_err)?;

    root.present()
        .map_err(draw_err)
        .with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sample rows shaped like the real suite's.
    pub(super) fn sample_bars() -> Vec<SuiteBar> {
        let row = |label: &str, mb_s: f64, cpu: f64, wire_mb: f64| SuiteBar {
            label: label.to_string(),
            effective_mb_s: mb_s,
            mb_per_cpu_s: cpu,
            effective_mb: 4096.0,
            wire_mb,
        };
        vec![
            row("iperf3 baseline - TCP", 4210.0, 2950.0, 4101.0),
            row(
                "Native PFS Offset-only Mode - TCP (xxh3, sequential)",
                15870.0,
                9120.0,
                1.47,
            ),
            row(
                "Native PFS Offset-only Mode - UDP (xxh3, sequential)",
                9330.0,
                5210.0,
                2.9,
            ),
            row(
                "Native PFS Offset-only Mode - Unix socket (blake3, random)",
                12400.0,
                7020.0,
                1.47,
            ),
            row(
                "Native PFS Full-copy Mode - TCP (crc32c, sequential)",
                2310.0,
                1240.0,
                4130.0,
            ),
            row("Native PFS Full-copy Mode - shm ring (none)", 7900.0, 0.0, 0.0004),
            row("Native PFS Offset-only Mode - UDP (skipped)", 0.0, 0.0, 0.0),
            row(
                "Plain read/write copy - TCP (no integrity, sequential)",
                712.0,
                690.0,
                4096.2,
            ),
        ]
    }

    pub(super) fn sample_series() -> Vec<Series> {
        let sizes: Vec<f64> = (6..=16).map(|e| 2f64.powi(e)).collect();
        let curve = |name: &str, peak: f64, half: f64| Series {
            name: name.to_string(),
            points: sizes.iter().map(|&s| (s, peak * s / (s + half))).collect(),
        };
        vec![
            curve("pfs tcp", 14000.0, 2048.0),
            curve("pfs udp", 9000.0, 1024.0),
            curve("pfs unix", 12000.0, 512.0),
            curve("iperf3 tcp", 4200.0, 4096.0),
        ]
    }

    /// Runs `f`; fails, saying so, when no font is installed (the tests
    /// that call it are ignored unless asked for).
    fn with_font(f: impl FnOnce()) {
        if let Err(e) = ensure_font() {
            panic!("needs a font: {e}");
        }
        f()
    }

    fn assert_png(path: &Path) {
        let bytes = std::fs::read(path).expect("chart written");
        assert!(
            bytes.starts_with(b"\x89PNG\r\n\x1a\n"),
            "{} is not a PNG",
            path.display()
        );
        assert!(
            bytes.len() > 10 * 1024,
            "{} is only {} bytes",
            path.display(),
            bytes.len()
        );
    }

    #[test]
    #[ignore = "needs a font"]
    fn suite_bars_writes_a_png() {
        with_font(|| {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("suite.png");
            suite_bars(&sample_bars(), "pfs bench: main suite", &path).unwrap();
            assert_png(&path);
            // One row, no CPU figure, values within 10× (linear axes).
            let one = &sample_bars()[5..6];
            let path = dir.path().join("one.png");
            suite_bars(one, "one row", &path).unwrap();
            assert_png(&path);
        });
    }

    #[test]
    #[ignore = "needs a font"]
    fn lines_writes_a_png_with_log2_x() {
        with_font(|| {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("lines.png");
            let series = sample_series();
            lines(
                &series,
                "Throughput by message size",
                "message size (bytes)",
                "MB/s",
                true,
                &path,
            )
            .unwrap();
            assert_png(&path);
        });
    }

    #[test]
    #[ignore = "needs a font"]
    fn lines_writes_a_png_with_linear_axes_and_log_y() {
        with_font(|| {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("lines.png");
            let series = vec![Series {
                name: "latency".into(),
                points: vec![(1.0, 2.0), (2.0, 30.0), (3.0, 900.0), (4.0, 0.5)],
            }];
            lines(&series, "t", "x", "µs", false, &path).unwrap();
            assert_png(&path);
        });
    }

    #[test]
    #[ignore = "needs a font"]
    fn dots_writes_a_png() {
        with_font(|| {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("dots.png");
            let row = |label: &str, v: [f64; 4]| DotRow {
                label: label.to_string(),
                values: v.iter().map(|&x| Some(x)).collect(),
            };
            let rows = [
                row("Unix socket + epoll", [24_000.0, 25_100.0, 37_500.0, 62_000.0]),
                row("shared-memory ring", [290.0, 310.0, 900.0, 4_000.0]),
                DotRow {
                    label: "failed".into(),
                    values: vec![None, None, None, None],
                },
            ];
            dots(
                &rows,
                &["p50", "mean", "p99", "p99.9"],
                "t",
                "one-way, ns",
                "ns",
                &path,
            )
            .unwrap();
            assert_png(&path);
            let one = [row("one", [10.0, 11.0, 12.0, 13.0])];
            dots(&one, &["p50", "mean", "p99", "p99.9"], "t", "x", "ns", &path).unwrap();
            assert_png(&path);
            assert!(dots(&rows[2..], &["p50"], "t", "x", "ns", &path).is_err());
        });
    }

    #[test]
    fn empty_inputs_are_errors_not_panics() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.png");
        let err = suite_bars(&[], "t", &path).unwrap_err();
        assert!(err.to_string().contains("nothing to plot"), "{err}");
        let skipped = &sample_bars()[6..7];
        assert!(suite_bars(skipped, "t", &path).is_err());
        let err = lines(&[], "t", "x", "y", true, &path).unwrap_err();
        assert!(err.to_string().contains("nothing to plot"), "{err}");
        let only_bad = [Series {
            name: "s".into(),
            points: vec![(0.0, 1.0), (f64::NAN, 2.0)],
        }];
        assert!(lines(&only_bad, "t", "x", "y", true, &path).is_err());
        assert!(!path.exists());
    }

    #[test]
    fn log2_ticks_are_powers_of_two() {
        let axis = Axis::log2(64.0 / 1.2, 65536.0 * 1.2, 1400.0);
        let want: Vec<f64> = (6..=16).map(|e| 2f64.powi(e)).collect();
        assert_eq!(axis.major, want);
        assert_eq!(axis.label(65536.0), "65,536");
        // Too narrow for every octave: every other one.
        let narrow = Axis::log2(64.0, 65536.0, 300.0);
        assert!(narrow.major.len() < want.len());
        assert!(narrow.minor.len() + narrow.major.len() == want.len());
    }

    #[test]
    fn log10_ticks_use_1_2_5_when_there_is_room() {
        let axis = Axis::log10(100.0, 100_000.0, 800.0);
        assert_eq!(
            axis.major,
            [100.0, 200.0, 500.0, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5]
        );
        let labels: Vec<String> = axis.major.iter().map(|&v| axis.label(v)).collect();
        assert_eq!(labels[3..6], ["1k", "2k", "5k"]);
        let tight = Axis::log10(1.0, 1e9, 400.0);
        assert!(tight
            .major
            .iter()
            .all(|v| (v.log10() - v.log10().round()).abs() < 1e-9));
    }

    #[test]
    fn linear_ticks_are_round() {
        let axis = Axis::linear(0.0, 15400.0, 700.0);
        assert_eq!(axis.major.first(), Some(&0.0));
        assert!(axis.major.iter().all(|v| v % 1000.0 == 0.0), "{:?}", axis.major);
        let small = Axis::linear(0.0, 1.1, 700.0);
        assert_eq!(small.major, [0.0, 0.2, 0.4, 0.6000000000000001, 0.8, 1.0]);
        assert_eq!(small.label(small.major[3]), "0.6");
        let quarter = Axis::linear(0.0, 10.0, 360.0);
        assert_eq!(quarter.major, [0.0, 2.5, 5.0, 7.5, 10.0]);
        assert_eq!(quarter.label(7.5), "7.5");
        assert_eq!(nice_step(0.37), 0.5);
        assert_eq!(nice_step(2300.0), 2500.0);
    }

    #[test]
    fn annotations_read_well() {
        assert_eq!(size_from_mb(1.47), "1.47 MB");
        assert_eq!(size_from_mb(4101.0), "4.1 GB");
        assert_eq!(size_from_mb(0.00088), "880 B");
        assert_eq!(ratio(1.47, 4096.0), "0.000359×");
        assert_eq!(ratio(4101.0, 4096.0), "1×");
        assert_eq!(ratio(0.0004, 4096.0), "9.8e-8×");
        assert_eq!(ratio(1.0, 0.0), "n/a");
        assert_eq!(rate(15870.4), "15,870");
        assert_eq!(rate(9.5), "9.50");
        assert_eq!(group_thousands(-1234567.0, 0), "-1,234,567");
        assert_eq!(compact(1500.0), "1.5k");
        assert_eq!(compact(0.2), "0.2");
    }
}
