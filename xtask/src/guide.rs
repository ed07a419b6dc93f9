//! `cargo xtask guide`: the user guide under `guide/`, built and checked as a
//! reader would meet it.
//!
//! 1. mdBook, installed from crates.io into `target/tools` at a pinned
//!    version (once; later runs reuse it);
//! 2. the pictures: the safety pictures regenerated from the library's own
//!    timing rules (`pictures.rs`), the campaign's timeline copied from a
//!    real run's picture; in CI a regenerated picture that differs from the
//!    committed one fails the build (the rules changed and the guide would
//!    show the old ones);
//! 3. `mdbook build` into `target/guide/book`;
//! 4. every local link, anchor and image of the rendered pages resolves, and
//!    every SVG is a whole document (links to other sites are not followed:
//!    the check runs offline);
//! 5. a screenshot of every chapter with headless Chromium into
//!    `target/guide/screenshots`; `--update-screenshot` also refreshes the
//!    ones kept with the guide: the safety chapter's first screen, shown in
//!    the guide's README (`guide/screenshots/safety.png`), and the whole
//!    chapter (`safety-full.png`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use leasehold_conformance::programs;

use crate::{Result, cargo, root, step};

/// The mdBook release the guide is built with.
const MDBOOK_VERSION: &str = "0.5.4";

/// The real run whose timeline the guide shows (CAMPAIGN.md, replicated
/// stores: PostgreSQL 15 with an asynchronous standby, 13 failovers).
const CAMPAIGN_PICTURE: &str = "campaign/pictures/postgres15-async-standby-25.svg";

/// The chapter whose screenshot the guide's README keeps.
const SAFETY_PAGE: &str = "safety.html";

pub(crate) fn run(args: &[String]) -> Result {
    let mut update_screenshot = false;
    for a in args {
        match a.as_str() {
            "--update-screenshot" => update_screenshot = true,
            other => {
                return Err(format!(
                    "`guide {other}`: unknown argument; `cargo xtask guide [--update-screenshot]`"
                ));
            }
        }
    }
    let guide = root().join("guide");
    let out = root().join("target/guide");
    let mdbook = install_mdbook()?;
    pictures(&guide.join("src/pictures"))?;
    let book = out.join("book");
    let mut build = Command::new(&mdbook);
    build.arg("build").arg(&guide).arg("--dest-dir").arg(&book);
    step("mdbook build", build)?;
    check_book(&book)?;
    screenshots(
        &book,
        &out.join("screenshots"),
        update_screenshot.then(|| {
            guide
                .join("screenshots")
                .join(SAFETY_PAGE.replace(".html", ".png"))
        }),
    )?;
    eprintln!("    the guide: {}", book.join("index.html").display());
    Ok(())
}

/// `target/tools/bin/mdbook` at [`MDBOOK_VERSION`], installed from crates.io
/// when it is missing or another version (without the `serve` and `watch`
/// features: the build needs neither, and they double the compile; and
/// unoptimised: it compiles in half the time and still builds the guide in
/// well under a second).
fn install_mdbook() -> Result<PathBuf> {
    let tools = root().join("target/tools");
    let bin = tools.join("bin/mdbook");
    let version = |bin: &Path| {
        Command::new(bin)
            .arg("--version")
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    if version(&bin).is_some_and(|v| v.ends_with(MDBOOK_VERSION)) {
        eprintln!("    mdbook {MDBOOK_VERSION}: {}", bin.display());
        return Ok(bin);
    }
    let mut install = cargo();
    install
        .args(["install", "mdbook", "--locked", "--no-default-features"])
        .args(["--features", "search", "--debug", "--version"])
        .arg(format!("={MDBOOK_VERSION}"))
        .arg("--root")
        .arg(&tools)
        // The workspace's own target dir would hold the workspace's lock
        // while mdBook builds; cargo install builds in a directory of its own.
        .env_remove("CARGO_TARGET_DIR");
    step(
        &format!("cargo install mdbook {MDBOOK_VERSION} (once, into target/tools)"),
        install,
    )?;
    match version(&bin) {
        Some(v) if v.ends_with(MDBOOK_VERSION) => Ok(bin),
        other => Err(format!(
            "{} reports {other:?} after the install; expected mdbook v{MDBOOK_VERSION}",
            bin.display()
        )),
    }
}

/// Writes the pictures into `dir`. Locally a changed picture is simply
/// rewritten (commit it); in CI it fails, because the committed guide would
/// show pictures the code no longer draws.
fn pictures(dir: &Path) -> Result {
    eprintln!("\n==> the guide's pictures");
    let before = read_pictures(dir);
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut written = crate::pictures::write_all(dir)?;
    let campaign = dir.join("campaign-run.svg");
    std::fs::copy(root().join(CAMPAIGN_PICTURE), &campaign)
        .map_err(|e| format!("{CAMPAIGN_PICTURE} -> {}: {e}", campaign.display()))?;
    written.push(campaign);
    let after = read_pictures(dir);
    let changed: Vec<&String> = after
        .iter()
        .filter(|(name, bytes)| before.get(*name) != Some(*bytes))
        .map(|(name, _)| name)
        .collect();
    for name in &changed {
        eprintln!("    changed: guide/src/pictures/{name}");
    }
    eprintln!(
        "<== the guide's pictures: {} written, {} changed",
        written.len(),
        changed.len()
    );
    if !changed.is_empty() && std::env::var_os("CI").is_some() {
        return Err(format!(
            "the committed guide pictures differ from what the code draws ({}); run \
             `cargo xtask guide` and commit guide/src/pictures",
            changed
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    Ok(())
}

fn read_pictures(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return BTreeMap::new();
    };
    entries
        .filter_map(std::result::Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            std::fs::read(e.path()).ok().map(|b| (name, b))
        })
        .collect()
}

/// Every local `href` and `src` of every rendered page resolves to a file
/// of the book, every `#anchor` to an `id` of its page, and every SVG is a
/// whole document. Fails with the list of what does not.
fn check_book(book: &Path) -> Result {
    eprintln!("\n==> links and images of the rendered guide");
    let book = &normalise(book);
    let mut pages = Vec::new();
    walk(book, &mut |p| {
        if p.extension().is_some_and(|e| e == "html") {
            pages.push(p.to_path_buf());
        }
    })?;
    let mut ids: BTreeMap<PathBuf, BTreeSet<String>> = BTreeMap::new();
    let mut texts = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).map_err(|e| format!("{}: {e}", page.display()))?;
        ids.insert(
            page.clone(),
            attribute_values(&text, "id").into_iter().collect(),
        );
        texts.push((page.clone(), text));
    }
    let mut broken = Vec::new();
    let mut links = 0;
    for (page, text) in &texts {
        let rel_page = page
            .strip_prefix(book)
            .unwrap_or(page)
            .display()
            .to_string();
        for (attr, target) in attribute_values(text, "href")
            .into_iter()
            .map(|t| ("link", t))
            .chain(
                attribute_values(text, "src")
                    .into_iter()
                    .map(|t| ("image", t)),
            )
        {
            if target.is_empty() || is_external(&target) {
                continue;
            }
            links += 1;
            let (path, fragment) = match target.split_once('#') {
                Some((p, f)) => (p, Some(f)),
                None => (target.as_str(), None),
            };
            let path = path.split('?').next().unwrap_or_default();
            let file = if path.is_empty() {
                page.clone()
            } else if let Some(from_root) = path.strip_prefix('/') {
                normalise(&book.join(from_root))
            } else {
                normalise(&page.parent().unwrap_or(book).join(path))
            };
            let file = if file.is_dir() {
                file.join("index.html")
            } else {
                file
            };
            if !file.starts_with(book) || !file.is_file() {
                broken.push(format!("{rel_page}: {attr} to {target}: no such file"));
                continue;
            }
            if let Some(fragment) = fragment.filter(|f| !f.is_empty()) {
                let known = ids.get(&file).is_some_and(|set| set.contains(fragment));
                if file.extension().is_some_and(|e| e == "html") && !known {
                    broken.push(format!("{rel_page}: {attr} to {target}: no such anchor"));
                }
            }
        }
    }
    let mut svgs = 0;
    walk(book, &mut |p| {
        if p.extension().is_some_and(|e| e == "svg") {
            svgs += 1;
            let text = std::fs::read_to_string(p).unwrap_or_default();
            let start = text.trim_start();
            // A trailing comment (a licence note) may follow the root element.
            let end = text.trim_end();
            let end = end
                .strip_suffix("-->")
                .and_then(|e| e.rfind("<!--").map(|i| e[..i].trim_end()))
                .unwrap_or(end);
            if !(start.starts_with("<svg") || start.starts_with("<?xml"))
                || !end.ends_with("</svg>")
            {
                let rel = p.strip_prefix(book).unwrap_or(p).display().to_string();
                broken.push(format!("{rel}: not a whole SVG document"));
            }
        }
    })?;
    if broken.is_empty() {
        eprintln!(
            "<== links and images: ok ({} pages, {links} local links and images, {svgs} SVGs)",
            pages.len()
        );
        return Ok(());
    }
    broken.sort();
    broken.dedup();
    for b in &broken {
        eprintln!("    {b}");
    }
    Err(format!(
        "the rendered guide has {} broken link(s) or image(s)",
        broken.len()
    ))
}

fn is_external(target: &str) -> bool {
    // A scheme (`https:`, `mailto:`, `data:`...) before any `/`, `#` or `.`.
    target
        .find(|c: char| !c.is_ascii_alphanumeric() && c != '+' && c != '-')
        .is_some_and(|i| i > 0 && target[i..].starts_with(':'))
}

/// The values of `name="..."` attributes in `html`, entity `&amp;` undone.
fn attribute_values(html: &str, name: &str) -> Vec<String> {
    let needle = format!(" {name}=\"");
    let mut out = Vec::new();
    let mut rest = html;
    while let Some(i) = rest.find(&needle) {
        rest = &rest[i + needle.len()..];
        if let Some(end) = rest.find('"') {
            out.push(rest[..end].replace("&amp;", "&"));
            rest = &rest[end..];
        }
    }
    out
}

/// `a/b/../c` as `a/c`, without touching the file system.
fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

fn walk(dir: &Path, f: &mut dyn FnMut(&Path)) -> Result {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries.filter_map(std::result::Result::ok) {
        let path = entry.path();
        if path.is_dir() {
            walk(&path, f)?;
        } else {
            f(&path);
        }
    }
    Ok(())
}

/// A full-page screenshot of every chapter (the pages `SUMMARY.md` lists,
/// in its order), one PNG each in `dir`; with `keep`, the safety chapter's
/// is copied there too.
fn screenshots(book: &Path, dir: &Path, keep: Option<PathBuf>) -> Result {
    eprintln!("\n==> screenshots of the rendered guide (headless Chromium)");
    let start = Instant::now();
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let summary = root().join("guide/src/SUMMARY.md");
    let summary =
        std::fs::read_to_string(&summary).map_err(|e| format!("{}: {e}", summary.display()))?;
    let pages = chapters(&summary);
    let profile = dir.join(".chromium-profile");
    for (i, page) in pages.iter().enumerate() {
        let html = book.join(page);
        let png = dir.join(page.replace('/', "-").replace(".html", ".png"));
        shoot(&html, &png, page_height(&html), &profile)?;
        let (width, height) = trim_blank_bottom(&png)?;
        eprintln!(
            "    [{}/{}] {} ({width} x {height})",
            i + 1,
            pages.len(),
            png.display()
        );
    }
    if let Some(keep) = keep {
        // The README's screenshot: the chapter's first screen and a half,
        // its opening and first picture, as a reader first sees it.
        if let Some(parent) = keep.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        shoot(&book.join(SAFETY_PAGE), &keep, 1500, &profile)?;
        eprintln!("    kept {}", keep.display());
        // And the whole chapter, every picture as a browser draws it.
        let whole = keep.with_file_name(SAFETY_PAGE.replace(".html", "-full.png"));
        let shot = dir.join(SAFETY_PAGE.replace(".html", ".png"));
        std::fs::copy(&shot, &whole)
            .map_err(|e| format!("{} -> {}: {e}", shot.display(), whole.display()))?;
        eprintln!("    kept {}", whole.display());
    }
    let _ = std::fs::remove_dir_all(&profile);
    eprintln!(
        "<== screenshots: {} pages in {:.0?}",
        pages.len(),
        start.elapsed()
    );
    Ok(())
}

/// A screenshot of `html` in a window 1280 px wide and `height` tall.
fn shoot(html: &Path, png: &Path, height: usize, profile: &Path) -> Result {
    let mut c = programs::command("chromium")?;
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--no-first-run",
        "--disable-dev-shm-usage",
        "--virtual-time-budget=3000",
    ])
    .arg(format!("--user-data-dir={}", profile.display()))
    .arg(format!("--window-size=1280,{height}"))
    .arg(format!("--screenshot={}", png.display()))
    .arg(format!("file://{}", html.display()));
    let _ = std::fs::remove_file(png);
    let output = c
        .output()
        .map_err(|e| format!("chromium: cannot run: {e}"))?;
    if !output.status.success() || !png.is_file() {
        return Err(format!(
            "chromium did not take a screenshot of {}: {}\n{}",
            html.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(())
}

/// Cuts the rows below the page's last drawn row (plus a margin) off the
/// screenshot `path`, and answers its size. The window was made taller than
/// the page, so the bottom rows repeat the background.
fn trim_blank_bottom(path: &Path) -> Result<(u32, u32)> {
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let file = std::fs::File::open(path).map_err(|e| err(&e))?;
    let mut reader = png::Decoder::new(std::io::BufReader::new(file))
        .read_info()
        .map_err(|e| err(&e))?;
    let size = reader
        .output_buffer_size()
        .ok_or_else(|| err(&"too large to decode"))?;
    let mut buf = vec![0; size];
    let info = reader.next_frame(&mut buf).map_err(|e| err(&e))?;
    let (width, height, line) = (info.width, info.height, info.line_size);
    let rows: Vec<&[u8]> = buf[..line * height as usize].chunks(line).collect();
    let Some(last) = rows.last() else {
        return Ok((width, height));
    };
    // The bottom row is background; the page ends at the last row that
    // differs from it anywhere right of the sidebar.
    let from = line / 5;
    let drawn = rows
        .iter()
        .rposition(|row| row[from..] != last[from..])
        .map_or(height, |r| r as u32 + 1);
    let keep = (drawn + 40).min(height);
    if keep == height {
        return Ok((width, height));
    }
    let out = std::fs::File::create(path).map_err(|e| err(&e))?;
    let mut encoder = png::Encoder::new(std::io::BufWriter::new(out), width, keep);
    encoder.set_color(info.color_type);
    encoder.set_depth(info.bit_depth);
    let mut writer = encoder.write_header().map_err(|e| err(&e))?;
    writer
        .write_image_data(&buf[..line * keep as usize])
        .map_err(|e| err(&e))?;
    writer.finish().map_err(|e| err(&e))?;
    Ok((width, keep))
}

/// The rendered pages of the chapters `SUMMARY.md` links, in its order.
fn chapters(summary: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in summary.lines() {
        let mut rest = line;
        while let Some(i) = rest.find("](") {
            rest = &rest[i + 2..];
            if let Some(end) = rest.find(')') {
                let target = &rest[..end];
                if let Some(md) = target.strip_suffix(".md") {
                    let page = if md.ends_with("README") {
                        format!("{}index.html", md.trim_end_matches("README"))
                    } else {
                        format!("{md}.html")
                    };
                    if !out.contains(&page) {
                        out.push(page);
                    }
                }
                rest = &rest[end..];
            }
        }
    }
    out
}

/// A window taller than the whole page: a generous guess from its length
/// (the screenshot is of the window; [`trim_blank_bottom`] cuts the rest),
/// between one screen and 16 000 px.
fn page_height(html: &Path) -> usize {
    let text = std::fs::read_to_string(html).unwrap_or_default();
    let main = text.split("<main>").nth(1).unwrap_or(&text);
    let lines = main.matches("<p>").count() * 4
        + main.matches("<li>").count()
        + main.matches("<tr>").count()
        + main.lines().count() / 3;
    let images = main.matches("<img").count();
    (900 + lines * 24 + images * 650).clamp(1000, 16_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chapters_follow_the_summary_and_map_readmes_to_index_pages() {
        let summary = "# Summary\n\n[Intro](README.md)\n- [Why](why.md)\n  - [PG](first/postgres.md)\n- [Sub](first/README.md)\n";
        assert_eq!(
            chapters(summary),
            [
                "index.html",
                "why.html",
                "first/postgres.html",
                "first/index.html"
            ]
        );
    }

    #[test]
    fn schemes_are_external_and_paths_are_not() {
        assert!(is_external("https://docs.rs/leasehold"));
        assert!(is_external("mailto:x@example.org"));
        assert!(!is_external("safety.html#the-floor"));
        assert!(!is_external("../pictures/x.svg"));
        assert!(!is_external("#top"));
    }

    #[test]
    fn attributes_are_read_with_entities_undone() {
        let html =
            r#"<a href="a.html#x">a</a> <img src="p/q.svg"> <h2 id="x"> <a href="b?c=1&amp;d=2">"#;
        assert_eq!(attribute_values(html, "href"), ["a.html#x", "b?c=1&d=2"]);
        assert_eq!(attribute_values(html, "src"), ["p/q.svg"]);
        assert_eq!(attribute_values(html, "id"), ["x"]);
    }

    #[test]
    fn a_missing_image_or_anchor_fails_the_check_and_a_whole_book_passes() {
        let dir =
            std::env::temp_dir().join(format!("leasehold-guide-check-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("pictures")).unwrap();
        std::fs::write(dir.join("pictures/a.svg"), "<svg></svg>\n<!-- note -->\n").unwrap();
        let page = |body: &str| format!("<html><body><h2 id=\"top\">x</h2>{body}</body></html>");
        std::fs::write(
            dir.join("index.html"),
            page(r#"<img src="pictures/a.svg"> <a href="other.html#top">o</a> <a href="https://x.org/">x</a>"#),
        )
        .unwrap();
        std::fs::write(dir.join("other.html"), page(r##"<a href="#top">t</a>"##)).unwrap();
        check_book(&dir).unwrap();
        std::fs::write(
            dir.join("other.html"),
            page(r#"<img src="pictures/b.svg">"#),
        )
        .unwrap();
        let e = check_book(&dir).unwrap_err();
        assert!(e.contains("1 broken"), "{e}");
        std::fs::write(
            dir.join("other.html"),
            page(r#"<a href="index.html#gone">g</a>"#),
        )
        .unwrap();
        assert!(check_book(&dir).is_err());
        std::fs::write(dir.join("other.html"), page("")).unwrap();
        std::fs::write(dir.join("pictures/a.svg"), "<svg><g>").unwrap();
        assert!(check_book(&dir).is_err(), "a cut-off SVG must fail");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn parent_steps_are_resolved() {
        assert_eq!(
            normalise(Path::new("/b/first/../pictures/x.svg")),
            Path::new("/b/pictures/x.svg")
        );
    }
}
