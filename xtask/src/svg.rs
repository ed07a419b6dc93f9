//! A small SVG builder for the guide's pictures: lines, boxes, text, arrows
//! and a time axis, written as plain text with fixed number formatting so the
//! same picture is the same bytes on every run.
//!
//! It also remembers where each label is (estimated from its length and
//! size), so a test can find labels that overlap.

use std::fmt::Write as _;

/// Colours that stay distinct for the common colour-vision deficiencies
/// (Okabe and Ito's palette), plus text and guide greys.
pub(crate) const BLUE: &str = "#0072B2";
pub(crate) const ORANGE: &str = "#E69F00";
pub(crate) const VERMILION: &str = "#D55E00";
pub(crate) const SKY: &str = "#56B4E9";
pub(crate) const GREEN: &str = "#009E73";
pub(crate) const GREY: &str = "#8A8A8A";
pub(crate) const LIGHT: &str = "#E6E6E6";
pub(crate) const INK: &str = "#222222";

/// Where a label's `x` is: its start, middle or end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Anchor {
    Start,
    Middle,
    End,
}

/// A label's estimated box: left, top, right, bottom.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Bounds {
    pub(crate) text: String,
    pub(crate) x0: f64,
    pub(crate) y0: f64,
    pub(crate) x1: f64,
    pub(crate) y1: f64,
}

impl Bounds {
    fn overlaps(&self, other: &Bounds) -> bool {
        self.x0 < other.x1 && other.x0 < self.x1 && self.y0 < other.y1 && other.y0 < self.y1
    }
}

/// A picture being drawn.
pub(crate) struct Svg {
    width: f64,
    height: f64,
    defs: String,
    body: String,
    labels: Vec<Bounds>,
}

/// Numbers in the output: one decimal, no `-0.0`.
fn n(v: f64) -> String {
    let s = format!("{v:.1}");
    if s == "-0.0" { "0.0".into() } else { s }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

impl Svg {
    /// A white picture `width` × `height` pixels.
    pub(crate) fn new(width: f64, height: f64) -> Self {
        let mut svg = Self {
            width,
            height,
            defs: String::new(),
            body: String::new(),
            labels: Vec::new(),
        };
        svg.rect(0.0, 0.0, width, height, "#FFFFFF", None);
        svg
    }

    /// The picture's width.
    pub(crate) fn width(&self) -> f64 {
        self.width
    }

    /// A line; `dash` is an SVG dash pattern such as `"4 3"`.
    pub(crate) fn line(
        &mut self,
        (x1, y1): (f64, f64),
        (x2, y2): (f64, f64),
        colour: &str,
        width: f64,
        dash: Option<&str>,
    ) {
        let dash = dash.map_or(String::new(), |d| format!(r#" stroke-dasharray="{d}""#));
        let _ = writeln!(
            self.body,
            r#"<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{colour}" stroke-width="{}"{dash}/>"#,
            n(x1),
            n(y1),
            n(x2),
            n(y2),
            n(width)
        );
    }

    /// A filled box, with an outline when `stroke` is given.
    pub(crate) fn rect(
        &mut self,
        x: f64,
        y: f64,
        w: f64,
        h: f64,
        fill: &str,
        stroke: Option<&str>,
    ) {
        let stroke = stroke.map_or(String::new(), |s| {
            format!(r#" stroke="{s}" stroke-width="1.2""#)
        });
        let _ = writeln!(
            self.body,
            r#"<rect x="{}" y="{}" width="{}" height="{}" fill="{fill}"{stroke}/>"#,
            n(x),
            n(y),
            n(w.max(0.0)),
            n(h.max(0.0))
        );
    }

    /// A hatched box: the background of a span where something is refused.
    pub(crate) fn hatch(&mut self, x: f64, y: f64, w: f64, h: f64, colour: &str) {
        let id = format!("hatch-{}", colour.trim_start_matches('#'));
        if !self.defs.contains(&id) {
            let _ = writeln!(
                self.defs,
                r##"<pattern id="{id}" width="8" height="8" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="8" height="8" fill="#FFFFFF"/><line x1="0" y1="0" x2="0" y2="8" stroke="{colour}" stroke-width="2"/></pattern>"##
            );
        }
        self.rect(x, y, w, h, &format!("url(#{id})"), Some(colour));
    }

    /// A circle.
    pub(crate) fn dot(&mut self, (x, y): (f64, f64), r: f64, fill: &str) {
        let _ = writeln!(
            self.body,
            r#"<circle cx="{}" cy="{}" r="{}" fill="{fill}"/>"#,
            n(x),
            n(y),
            n(r)
        );
    }

    /// A cross (a refused or unanswered call).
    pub(crate) fn cross(&mut self, (x, y): (f64, f64), r: f64, colour: &str) {
        self.line((x - r, y - r), (x + r, y + r), colour, 2.0, None);
        self.line((x - r, y + r), (x + r, y - r), colour, 2.0, None);
    }

    /// A line with an arrow head at its end.
    pub(crate) fn arrow(
        &mut self,
        from: (f64, f64),
        to: (f64, f64),
        colour: &str,
        dash: Option<&str>,
    ) {
        self.line(from, to, colour, 1.5, dash);
        let (dx, dy) = (to.0 - from.0, to.1 - from.1);
        let len = (dx * dx + dy * dy).sqrt().max(1e-9);
        let (ux, uy) = (dx / len, dy / len);
        let (bx, by) = (to.0 - ux * 8.0, to.1 - uy * 8.0);
        let (px, py) = (-uy * 4.0, ux * 4.0);
        let _ = writeln!(
            self.body,
            r#"<polygon points="{},{} {},{} {},{}" fill="{colour}"/>"#,
            n(to.0),
            n(to.1),
            n(bx + px),
            n(by + py),
            n(bx - px),
            n(by - py)
        );
    }

    /// A span marked with arrow heads at both ends and a label above it.
    pub(crate) fn span(
        &mut self,
        x1: f64,
        x2: f64,
        y: f64,
        colour: &str,
        label: &str,
        anchor: Anchor,
    ) {
        self.arrow((x1 + (x2 - x1) / 2.0, y), (x2, y), colour, None);
        self.arrow((x1 + (x2 - x1) / 2.0, y), (x1, y), colour, None);
        let x = match anchor {
            Anchor::Start => x1,
            Anchor::Middle => (x1 + x2) / 2.0,
            Anchor::End => x2,
        };
        self.text(x, y - 5.0, label, anchor, 13.0, colour, false);
    }

    /// A label, on a white halo so lines behind it do not cut through it;
    /// its box is remembered for the overlap check.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn text(
        &mut self,
        x: f64,
        y: f64,
        s: &str,
        anchor: Anchor,
        size: f64,
        colour: &str,
        bold: bool,
    ) {
        let w = text_width(s, size, bold);
        let x0 = match anchor {
            Anchor::Start => x,
            Anchor::Middle => x - w / 2.0,
            Anchor::End => x - w,
        };
        self.labels.push(Bounds {
            text: s.to_owned(),
            x0,
            y0: y - size * 0.8,
            x1: x0 + w,
            y1: y + size * 0.2,
        });
        let anchor = match anchor {
            Anchor::Start => "start",
            Anchor::Middle => "middle",
            Anchor::End => "end",
        };
        let weight = if bold { r#" font-weight="bold""# } else { "" };
        let _ = writeln!(
            self.body,
            r##"<text x="{}" y="{}" text-anchor="{anchor}" font-size="{}" fill="{colour}"{weight} stroke="#FFFFFF" stroke-width="3" paint-order="stroke">{}</text>"##,
            n(x),
            n(y),
            n(size),
            escape(s)
        );
    }

    /// A label that starts at `x`, or ends there when starting there would
    /// run past the right edge.
    pub(crate) fn text_fit(&mut self, x: f64, y: f64, s: &str, colour: &str, bold: bool) {
        let fits = x + text_width(s, 13.0, bold) <= self.width - 10.0;
        let anchor = if fits { Anchor::Start } else { Anchor::End };
        self.text(x, y, s, anchor, 13.0, colour, bold);
    }

    /// Footnotes under a picture: lines from the left edge, 20 px apart,
    /// the first at `y`.
    pub(crate) fn notes(&mut self, y: f64, lines: &[String]) {
        self.notes_in(y, lines, INK, false);
    }

    /// [`Svg::notes`] in `colour`, the first line bold when `bold_first`.
    pub(crate) fn notes_in(&mut self, y: f64, lines: &[String], colour: &str, bold_first: bool) {
        for (i, line) in lines.iter().enumerate() {
            self.text(
                20.0,
                y + 20.0 * i as f64,
                line,
                Anchor::Start,
                13.0,
                colour,
                bold_first && i == 0,
            );
        }
    }

    /// The title (bold) and the one-line legend under it.
    pub(crate) fn heading(&mut self, title: &str, legend: &[(&str, &str)]) {
        self.text(20.0, 28.0, title, Anchor::Start, 16.0, INK, true);
        let mut x = 20.0;
        for (colour, what) in legend {
            self.rect(x, 40.0, 14.0, 10.0, colour, None);
            self.text(x + 19.0, 50.0, what, Anchor::Start, 13.0, INK, false);
            x += 19.0 + text_width(what, 13.0, false) + 18.0;
        }
    }

    /// Labels whose boxes overlap, as pairs of their texts.
    pub(crate) fn overlapping_labels(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (i, a) in self.labels.iter().enumerate() {
            for b in &self.labels[i + 1..] {
                if a.overlaps(b) {
                    out.push((a.text.clone(), b.text.clone()));
                }
            }
        }
        out
    }

    /// Labels that stick out of the picture.
    pub(crate) fn clipped_labels(&self) -> Vec<String> {
        self.labels
            .iter()
            .filter(|b| b.x0 < 0.0 || b.y0 < 0.0 || b.x1 > self.width || b.y1 > self.height)
            .map(|b| b.text.clone())
            .collect()
    }

    /// The finished document.
    pub(crate) fn finish(&self) -> String {
        format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" \
             viewBox=\"0 0 {w} {h}\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n\
             <defs>\n{}</defs>\n{}</svg>\n",
            self.defs,
            self.body,
            w = n(self.width),
            h = n(self.height),
        )
    }
}

/// A label's estimated width: average glyph widths of a sans-serif face
/// (DejaVu Sans is among the widest), so the estimate errs on the wide side.
pub(crate) fn text_width(s: &str, size: f64, bold: bool) -> f64 {
    let em: f64 = s
        .chars()
        .map(|c| match c {
            'i' | 'l' | 'j' | '.' | ',' | ':' | ';' | '\'' | '|' | '!' => 0.32,
            ' ' | 'f' | 't' | 'r' | '(' | ')' | '[' | ']' | '-' => 0.40,
            'm' | 'w' | 'M' | 'W' => 0.90,
            '−' | '+' | '=' | '×' | '≥' | '≤' | '<' | '>' => 0.84,
            c if c.is_ascii_uppercase() => 0.70,
            c if c.is_ascii_digit() => 0.64,
            _ => 0.60,
        })
        .sum();
    em * size * if bold { 1.08 } else { 1.0 }
}

/// Maps seconds to pixels along a time axis.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TimeAxis {
    pub(crate) x0: f64,
    pub(crate) x1: f64,
    pub(crate) t0: f64,
    pub(crate) t1: f64,
}

impl TimeAxis {
    /// The x of time `t` (seconds).
    pub(crate) fn x(&self, t: f64) -> f64 {
        self.x0 + (t - self.t0) / (self.t1 - self.t0) * (self.x1 - self.x0)
    }

    /// Swim lanes along the axis: a light line at each `y`, its name at the
    /// left edge.
    pub(crate) fn lanes(&self, svg: &mut Svg, lanes: &[(f64, &str)]) {
        for &(y, name) in lanes {
            svg.line((self.x0, y), (self.x1, y), LIGHT, 1.0, None);
            svg.text(20.0, y + 5.0, name, Anchor::Start, 14.0, INK, true);
        }
    }

    /// A tick spacing that gives at most a dozen ticks.
    pub(crate) fn step(&self) -> f64 {
        let span = self.t1 - self.t0;
        [
            0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
        ]
        .into_iter()
        .find(|step| span / step <= 12.0)
        .unwrap_or(span / 12.0)
    }

    /// Draws the axis at `y` with a tick and a label every `step` seconds;
    /// `label` names each tick (so two clocks can label one axis).
    pub(crate) fn draw(
        &self,
        svg: &mut Svg,
        y: f64,
        step: f64,
        label: impl Fn(f64) -> String,
        colour: &str,
    ) {
        svg.line((self.x0, y), (self.x1, y), colour, 1.0, None);
        let mut i = 0u32;
        loop {
            let t = self.t0 + f64::from(i) * step;
            if t > self.t1 + 1e-9 {
                break;
            }
            let x = self.x(t);
            svg.line((x, y), (x, y + 5.0), colour, 1.0, None);
            svg.text(x, y + 19.0, &label(t), Anchor::Middle, 13.0, colour, false);
            i += 1;
        }
    }
}

/// A number of seconds as the pictures label it: `9 s`, `9.25 s`.
pub(crate) fn seconds(t: f64) -> String {
    let hundredths = format!("{:.2}", (t * 100.0).round() / 100.0);
    let trimmed = hundredths.trim_end_matches('0').trim_end_matches('.');
    format!("{trimmed} s")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_and_numbers_are_fixed() {
        let mut s = Svg::new(100.0, 50.0);
        s.text(10.0, 20.0, "a < b & c", Anchor::Start, 13.0, INK, false);
        s.line((0.0, -0.01), (1.0 / 3.0, 2.0), INK, 1.0, None);
        let out = s.finish();
        assert!(out.contains("a &lt; b &amp; c"), "{out}");
        assert!(out.contains(r#"y1="0.0" x2="0.3""#), "{out}");
    }

    #[test]
    fn overlapping_and_clipped_labels_are_found() {
        let mut s = Svg::new(200.0, 100.0);
        s.text(10.0, 20.0, "first label", Anchor::Start, 13.0, INK, false);
        s.text(30.0, 24.0, "second", Anchor::Start, 13.0, INK, false);
        s.text(10.0, 80.0, "apart", Anchor::Start, 13.0, INK, false);
        s.text(
            190.0,
            80.0,
            "past the edge",
            Anchor::Start,
            13.0,
            INK,
            false,
        );
        assert_eq!(
            s.overlapping_labels(),
            vec![("first label".to_owned(), "second".to_owned())]
        );
        assert_eq!(s.clipped_labels(), vec!["past the edge".to_owned()]);
    }

    #[test]
    fn seconds_are_labelled_with_the_digits_they_need() {
        assert_eq!(seconds(9.0), "9 s");
        assert_eq!(seconds(9.5), "9.5 s");
        assert_eq!(seconds(15.667), "15.67 s");
        assert_eq!(seconds(21.0006), "21 s");
        assert_eq!(seconds(0.0), "0 s");
    }
}
