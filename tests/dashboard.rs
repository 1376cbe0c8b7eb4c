//! The dashboard rendered with ratatui's test backend from recorded `bbrscope stream` captures
//! (tests/fixtures, made with scripts/record-fixture.sh). No root needed.

use std::time::Duration;

use bbrscope::{
    replay::{Record, parse_all},
    tui::{
        Feed,
        app::{Action, App, Playback, View},
        theme::Theme,
        view,
    },
};
use ratatui::{
    Terminal,
    backend::TestBackend,
    buffer::Buffer,
    crossterm::event::{KeyCode, KeyEvent, KeyModifiers},
    style::Color,
};

fn fixture(name: &str) -> Vec<Record> {
    let path = format!("{}/../tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    parse_all(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// An app that has played the whole recording.
fn played(name: &str) -> App {
    let records = fixture(name);
    let mut feed = Feed::new(records);
    let playback = Playback { speed: 1.0, paused: false, finished: false, position_s: 0.0, length_s: feed.length_s() };
    let mut app = App::new(name, Vec::new(), Some(playback));
    feed.advance(&mut app, Duration::from_secs(3600));
    app
}

fn render(app: &App, w: u16, h: u16, theme: Theme) -> Buffer {
    let mut term = Terminal::new(TestBackend::new(w, h)).unwrap();
    term.draw(|f| view::draw(f, app, &theme)).unwrap();
    term.backend().buffer().clone()
}

fn lines(buf: &Buffer) -> Vec<String> {
    (0..buf.area.height).map(|y| (0..buf.area.width).map(|x| buf[(x, y)].symbol().to_string()).collect()).collect()
}

fn key(app: &mut App, code: KeyCode) -> Action {
    app.on_key(KeyEvent::new(code, KeyModifiers::NONE))
}

#[test]
fn flow_list_shows_both_algorithms_with_verdicts() {
    let app = played("cubic-vs-bbr.ndjson");
    let text = lines(&render(&app, 100, 30, Theme { color: true })).join("\n");
    assert!(text.contains("PEER") && text.contains("VERDICT"), "{text}");
    for cc in ["cubic", "bbr"] {
        assert!(
            text.lines().any(|l| l.contains(&format!(" {cc} ")) && l.contains("10.198.0.2:")),
            "{cc} row missing:\n{text}"
        );
    }
    // The recording ends with both flows closed; the footer shows the replay state and cost.
    assert!(text.contains("closed"), "{text}");
    assert!(text.contains("replay end"), "{text}");
    assert!(text.contains("events") && text.contains("no drops"), "{text}");
}

/// Height (rows from the bottom) of the highest plotted dot in each column of a chart region.
fn profile(buf: &Buffer, x0: u16, x1: u16, y0: u16, y1: u16) -> Vec<Option<u16>> {
    (x0..x1)
        .map(|x| {
            (y0..y1).find_map(|y| {
                let s = buf[(x, y)].symbol();
                let c = s.chars().next()?;
                // Braille cells other than the blank one are plotted dots.
                (('\u{2801}'..='\u{28ff}').contains(&c)).then_some(y1 - y)
            })
        })
        .collect()
}

#[test]
fn cubic_sawtooth_shows_as_teeth() {
    let mut app = played("cubic-sawtooth.ndjson");
    // Zoom to 10 s: the recording's CUBIC flow halves its backlog every ~0.6 s.
    key(&mut app, KeyCode::Char('+'));
    key(&mut app, KeyCode::Char('+'));
    assert_eq!(app.window_ns(), 10_000_000_000);
    let flow = app.selected_flow().expect("a selected flow");
    assert_eq!(flow.cc, "cubic");
    // In the data: many multiplicative decreases of about 30%.
    let cwnd: Vec<u32> = flow.history.iter().filter_map(|p| p.cwnd).collect();
    let cuts = cwnd.windows(2).filter(|w| (w[1] as f64) < w[0] as f64 * 0.85).count();
    assert!(cuts >= 10, "expected many CUBIC reductions, found {cuts}: {cwnd:?}");

    // On screen: find the cwnd chart and count peaks along its top edge.
    let buf = render(&app, 140, 60, Theme { color: false });
    let text = lines(&buf);
    let top = text.iter().position(|l| l.contains("cwnd (packets)")).expect("cwnd chart");
    let bottom = text[top..].iter().position(|l| l.contains("-10s")).map(|i| i + top).expect("x axis");
    let prof = profile(&buf, 10, 138, top as u16 + 1, bottom as u16 - 1);
    let heights: Vec<u16> = prof.into_iter().flatten().collect();
    let mut peaks = 0;
    let mut rising = false;
    for w in heights.windows(2) {
        if w[1] > w[0] {
            rising = true;
        } else if w[1] + 1 < w[0] && rising {
            peaks += 1;
            rising = false;
        }
    }
    assert!(peaks >= 5, "expected several teeth in the cwnd chart, saw {peaks}:\n{}", text[top..=bottom].join("\n"));
}

#[test]
fn compare_view_puts_cubic_and_bbr_side_by_side() {
    let mut app = played("cubic-vs-bbr.ndjson");
    // Compare needs live flows: look at the recording just before its flows closed.
    let records = fixture("cubic-vs-bbr.ndjson");
    let last_sample = records
        .iter()
        .filter_map(|r| match r {
            Record::Event(bbrscope::event::Event::Sample(s)) if !s.closing => Some(s.head.ts_ns),
            _ => None,
        })
        .max()
        .unwrap();
    let mut feed = Feed::new(records.into_iter().filter(|r| r.ts_ns() <= last_sample).collect());
    app = {
        let mut a = App::new("x", Vec::new(), app.playback.clone());
        feed.advance(&mut a, Duration::from_secs(3600));
        a
    };
    key(&mut app, KeyCode::Char('c'));
    assert_eq!(app.view, View::Compare);
    let text = lines(&render(&app, 120, 40, Theme { color: true })).join("\n");
    assert!(text.contains("cubic (1 flow)") && text.contains("bbr (1 flow)"), "{text}");
    assert!(text.contains("RTT inflation") && text.contains("retransmits"), "{text}");
    assert!(text.contains("throughput (Mbit/s)") && text.contains("smoothed RTT (ms)"), "{text}");
    // Each side's throughput is a rate in ss units.
    assert!(text.matches("Mbps").count() >= 2, "{text}");
}

#[test]
fn selected_flow_explains_its_verdict() {
    let mut app = played("cubic-sawtooth.ndjson");
    // At the end the flow has closed; step back to while it was sending.
    let records = fixture("cubic-sawtooth.ndjson");
    let mid = records[records.len() / 2].ts_ns();
    let mut feed = Feed::new(records.into_iter().filter(|r| r.ts_ns() <= mid).collect());
    let mut live = App::new("x", Vec::new(), app.playback.take());
    feed.advance(&mut live, Duration::from_secs(3600));
    let text = lines(&render(&live, 120, 40, Theme { color: true })).join("\n");
    // CUBIC filling a drop-tail queue: loss while the RTT is inflated (congestion, not random).
    assert!(text.contains("Loss-limited at a full queue"), "{text}");
    assert!(text.contains("CUBIC W_max"), "{text}");
}

#[test]
fn works_at_80x24_and_without_colour() {
    let mut app = played("cubic-vs-bbr.ndjson");
    let buf = render(&app, 80, 24, Theme { color: false });
    let text = lines(&buf);
    assert!(text[0].contains("bbrscope"));
    assert!(text.iter().any(|l| l.contains("cubic")));
    assert!(text[23].contains("q quit"), "footer: {}", text[23]);
    for y in 0..24 {
        for x in 0..80 {
            let c = &buf[(x, y)];
            assert!(c.fg == Color::Reset && c.bg == Color::Reset, "colour at {x},{y} with NO_COLOR");
        }
    }
    // Help lists every key and closes on any key.
    key(&mut app, KeyCode::Char('?'));
    let text = lines(&render(&app, 80, 24, Theme { color: false })).join("\n");
    assert!(text.contains("keys") && text.contains("zoom the time axis"), "{text}");
    assert_eq!(key(&mut app, KeyCode::Char('x')), Action::Continue);
    assert!(!app.help);
    assert_eq!(key(&mut app, KeyCode::Char('q')), Action::Quit);
}

#[test]
fn keys_sort_filter_and_replay_controls() {
    let mut app = played("cubic-vs-bbr.ndjson");
    key(&mut app, KeyCode::Char('s'));
    assert_eq!(app.sort.name(), "cwnd");
    key(&mut app, KeyCode::Char('/'));
    for c in "bbr".chars() {
        key(&mut app, KeyCode::Char(c));
    }
    key(&mut app, KeyCode::Enter);
    assert_eq!(app.visible().len(), 1);
    assert_eq!(app.visible()[0].cc, "bbr");
    key(&mut app, KeyCode::Esc);
    assert_eq!(app.visible().len(), 2);

    let speed = app.playback.as_ref().unwrap().speed;
    key(&mut app, KeyCode::Char(']'));
    assert_eq!(app.playback.as_ref().unwrap().speed, speed * 2.0);
    key(&mut app, KeyCode::Char('p'));
    assert!(app.playback.as_ref().unwrap().paused);

    // Paused playback does not move.
    let records = fixture("cubic-vs-bbr.ndjson");
    let mut feed = Feed::new(records);
    let pb = Playback { speed: 1.0, paused: true, finished: false, position_s: 0.0, length_s: feed.length_s() };
    let mut paused = App::new("x", Vec::new(), Some(pb));
    feed.advance(&mut paused, Duration::from_secs(5));
    assert_eq!(paused.playback.as_ref().unwrap().position_s, 0.0);
    paused.playback.as_mut().unwrap().paused = false;
    feed.advance(&mut paused, Duration::from_secs(5));
    assert!((paused.playback.as_ref().unwrap().position_s - 5.0).abs() < 0.01);
}
