//! The dashboard rendered with ratatui's test backend from recorded `bbrscope stream` captures
//! (tests/fixtures, made with scripts/record-fixture.sh). No root needed.

use std::{
    ops::{Deref, DerefMut},
    time::Duration,
};

use bbrscope::{
    observe::{
        flow::{Flow, FlowTable},
        replay::{Record, parse_all},
    },
    tui::{
        Feed, Panel,
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
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    parse_all(&std::fs::read_to_string(&path).unwrap()).unwrap().records
}

/// A dashboard's state with the flow table it shows (live, the observer's loop owns the table;
/// in a replay, the test, as `bbrscope replay` does).
struct Dash {
    app: App,
    table: FlowTable,
}

impl Deref for Dash {
    type Target = App;
    fn deref(&self) -> &App {
        &self.app
    }
}

impl DerefMut for Dash {
    fn deref_mut(&mut self) -> &mut App {
        &mut self.app
    }
}

impl Dash {
    fn new(app: App) -> Self {
        Dash { app, table: App::table() }
    }

    /// Plays `real` of `feed`'s recording.
    fn play(&mut self, feed: &mut Feed, real: Duration) {
        feed.advance(&mut self.app, &mut self.table, real);
    }

    fn visible(&self) -> Vec<&Flow> {
        self.app.visible(&self.table)
    }

    fn selected_flow(&self) -> Option<&Flow> {
        self.app.selected_flow(&self.table)
    }
}

/// An app that has played the whole recording.
fn played(name: &str) -> Dash {
    let records = fixture(name);
    let mut feed = Feed::new(records);
    let mut app = Dash::new(App::new(name, Vec::new(), Some(Playback::new(1.0, false))));
    app.play(&mut feed, Duration::from_secs(3600));
    app
}

fn render(app: &Dash, w: u16, h: u16, theme: Theme) -> Buffer {
    render_with(app, None, w, h, theme)
}

/// The dashboard with a command's panel (a running experiment's).
fn render_with(d: &Dash, panel: Option<&dyn Panel>, w: u16, h: u16, theme: Theme) -> Buffer {
    let mut term = Terminal::new(TestBackend::new(w, h)).unwrap();
    term.draw(|f| view::draw(f, &d.app, &d.table, panel, &theme)).unwrap();
    term.backend().buffer().clone()
}

fn lines(buf: &Buffer) -> Vec<String> {
    (0..buf.area.height).map(|y| (0..buf.area.width).map(|x| buf[(x, y)].symbol().to_string()).collect()).collect()
}

fn key(d: &mut Dash, code: KeyCode) -> Action {
    d.app.on_key(KeyEvent::new(code, KeyModifiers::NONE), &d.table)
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
    let cuts = cwnd.windows(2).filter(|w| f64::from(w[1]) < f64::from(w[0]) * 0.85).count();
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
            Record::Event(bbrscope::observe::event::Event::Sample(s)) if !s.closing => Some(s.head.ts_ns),
            _ => None,
        })
        .max()
        .unwrap();
    let mut feed = Feed::new(records.into_iter().filter(|r| r.ts_ns() <= last_sample).collect());
    app = {
        let mut a = Dash::new(App::new("x", Vec::new(), app.playback.clone()));
        a.play(&mut feed, Duration::from_secs(3600));
        a
    };
    key(&mut app, KeyCode::Char('c'));
    assert_eq!(app.view, View::Compare);
    let text = lines(&render(&app, 120, 40, Theme { color: true })).join("\n");
    assert!(text.contains("cubic (1 flow)") && text.contains("bbr (1 flow)"), "{text}");
    assert!(text.contains("RTT inflation") && text.contains("retransmits"), "{text}");
    assert!(text.contains("throughput (Mbit/s)") && text.contains("smoothed RTT (ms)"), "{text}");
    // Each side's throughput is a rate, in the screen's one rate unit.
    assert!(text.matches("Mbit/s").count() >= 3, "{text}");
}

#[test]
fn selected_flow_explains_its_verdict() {
    let mut app = played("cubic-sawtooth.ndjson");
    // At the end the flow has closed; step back to while it was sending.
    let records = fixture("cubic-sawtooth.ndjson");
    let mid = records[records.len() / 2].ts_ns();
    let mut feed = Feed::new(records.into_iter().filter(|r| r.ts_ns() <= mid).collect());
    let mut live = Dash::new(App::new("x", Vec::new(), app.playback.take()));
    live.play(&mut feed, Duration::from_secs(3600));
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
    let mut paused = Dash::new(App::new("x", Vec::new(), Some(Playback::new(1.0, true))));
    paused.play(&mut feed, Duration::from_secs(5));
    assert_eq!(paused.playback.as_ref().unwrap().position_s, 0.0);
    paused.playback.as_mut().unwrap().paused = false;
    paused.play(&mut feed, Duration::from_secs(5));
    assert!((paused.playback.as_ref().unwrap().position_s - 5.0).abs() < 0.01);
}

// ---------------------------------------------------------------------------------------------
// Issue 13: what the dashboard got wrong.

/// The cubic-vs-bbr recording up to its middle, while both flows send.
fn mid_recording() -> Dash {
    let records = fixture("cubic-vs-bbr.ndjson");
    let mid = records[records.len() / 2].ts_ns();
    let mut feed = Feed::new(records.into_iter().filter(|r| r.ts_ns() <= mid).collect());
    let mut app = Dash::new(App::new("x", Vec::new(), Some(Playback::new(1.0, false))));
    app.play(&mut feed, Duration::from_secs(3600));
    app
}

/// `flows` sample lines of NDJSON, one every 100 ms for `secs` seconds; `extra(flow, i)` adds
/// each sample's metric fields.
fn synthetic(flows: &[(u64, &str)], secs: u64, extra: impl Fn(u64, u64) -> String) -> Dash {
    let mut text = String::new();
    for i in 0..secs * 10 {
        for &(cookie, cc) in flows {
            text += &format!(
                r#"{{"type":"sample","ts":{},"cookie":{cookie},"src":"10.0.0.1:{cookie}","dst":"10.0.0.2:443","cc":"{cc}","ca_state":"open","acks":1,"retrans_coalesced":0,{}}}"#,
                1000.0 + i as f64 / 10.0,
                extra(cookie, i)
            );
            text.push('\n');
        }
    }
    let mut feed = Feed::new(parse_all(&text).unwrap().records);
    let mut app = Dash::new(App::new("synthetic", Vec::new(), Some(Playback::new(1.0, false))));
    app.play(&mut feed, Duration::from_secs(3600));
    app
}

/// The rows of the chart titled `title` (from its title row to its x-axis labels).
fn chart_rows<'a>(text: &'a [String], title: &str) -> &'a [String] {
    let top = text.iter().position(|l| l.contains(title)).unwrap_or_else(|| panic!("no {title}:\n{}", text.join("\n")));
    let bottom = text[top..].iter().position(|l| l.contains("now")).map(|i| i + top).expect("x axis");
    &text[top..=bottom]
}

/// The y-axis labels of a chart: what stands between the borders on the left and the axis line.
fn y_labels(rows: &[String]) -> Vec<String> {
    rows.iter()
        .filter_map(|l| {
            let rest = l.trim_start_matches(['│', ' ']);
            let label = rest.split(['│', '└']).next()?.trim();
            (!label.is_empty() && label.chars().next()?.is_ascii_digit()).then(|| label.to_string())
        })
        .collect()
}

#[test]
fn filtering_away_the_selected_flow_moves_the_detail_pane() {
    let mut app = mid_recording();
    while app.selected_flow().unwrap().cc != "cubic" {
        key(&mut app, KeyCode::Down);
    }
    key(&mut app, KeyCode::Char('/'));
    for c in "bbr".chars() {
        key(&mut app, KeyCode::Char(c));
    }
    assert_eq!(app.selected_flow().map(|f| f.cc.as_str()), Some("bbr"), "the selection follows the list");
    let text = lines(&render(&app, 120, 40, Theme { color: true })).join("\n");
    assert!(!text.contains("cubic"), "a filtered-out flow stays in the detail pane:\n{text}");
    assert!(text.contains("cwnd (packets)"), "{text}");
    // Nothing matches: no detail pane at all.
    key(&mut app, KeyCode::Char('x'));
    assert_eq!(app.selected_flow().map(|f| f.cc), None);
    let text = lines(&render(&app, 120, 40, Theme { color: true })).join("\n");
    assert!(text.contains("no flow matches") && !text.contains("cwnd (packets)"), "{text}");
    // Esc brings the flows back, one of them selected.
    key(&mut app, KeyCode::Esc);
    key(&mut app, KeyCode::Esc);
    assert!(app.selected_flow().is_some());
}

/// A 20 Mbit/s flow whose pacing rate starts at 23,524 Mbit/s (before its first RTT sample) and
/// whose first half second bursts at 400 Mbit/s: the axis must follow the 20 Mbit/s.
#[test]
fn rate_axis_follows_throughput_not_pacing_or_a_start_up_spike() {
    let app = synthetic(&[(1, "cubic")], 20, |_, i| {
        let burst = i < 5;
        let acked = if burst { i * 5_000_000 } else { 25_000_000 + (i - 5) * 250_000 };
        let pacing = if i < 3 { 23_524_000_000u64 } else { 24_000_000 };
        let delivery = if burst { 400_000_000 } else { 20_000_000 };
        format!(
            r#""cwnd":100,"srtt_us":40000,"min_rtt_us":39000,"pacing_rate_bps":{pacing},"delivery_rate_bps":{delivery},"bytes_acked":{acked}"#
        )
    });
    let text = lines(&render(&app, 120, 60, Theme { color: true }));
    let rows = chart_rows(&text, "rate (Mbit/s)");
    let labels = y_labels(rows);
    let top = labels.iter().filter_map(|l| l.parse::<f64>().ok()).fold(0.0, f64::max);
    assert!((20.0..=40.0).contains(&top), "rate axis tops at {top} Mbit/s: {labels:?}\n{}", rows.join("\n"));
}

/// Loopback RTTs of tens of microseconds read "0.1/0.1/0.0 ms" on a ms axis with one decimal.
#[test]
fn rtt_axis_labels_are_distinct_in_a_unit_that_fits() {
    let rtts = |_: u64, i: u64| {
        format!(r#""cwnd":10,"srtt_us":{},"min_rtt_us":40,"bytes_acked":{}"#, 50 + i % 40, i * 100_000)
    };
    let mut app = synthetic(&[(1, "cubic"), (2, "bbr")], 20, rtts);
    let text = lines(&render(&app, 120, 60, Theme { color: true }));
    let rows = chart_rows(&text, "RTT (");
    assert!(rows[0].contains("RTT (µs)"), "{}", rows[0]);
    let labels = y_labels(rows);
    assert_eq!(labels.len(), 3, "{labels:?}\n{}", rows.join("\n"));
    assert!(labels[0] != labels[1] && labels[1] != labels[2], "{labels:?}\n{}", rows.join("\n"));
    key(&mut app, KeyCode::Char('c'));
    let text = lines(&render(&app, 120, 40, Theme { color: true }));
    let rows = chart_rows(&text, "smoothed RTT (");
    let labels = y_labels(rows);
    assert!(rows[0].contains("(µs)") && labels.len() == 3 && labels[0] != labels[1], "{labels:?}");

    // Milliseconds a little apart get a decimal each (not "1/1/2").
    let ms = |_: u64, i: u64| format!(r#""cwnd":10,"srtt_us":{},"min_rtt_us":900,"bytes_acked":{}"#, 1000 + i, i);
    let app = synthetic(&[(1, "cubic")], 20, ms);
    let text = lines(&render(&app, 120, 60, Theme { color: true }));
    let rows = chart_rows(&text, "RTT (");
    let labels = y_labels(rows);
    assert!(rows[0].contains("RTT (ms)") && labels.len() == 3, "{labels:?}\n{}", rows.join("\n"));
    assert!(labels[0] != labels[1] && labels[1] != labels[2], "{labels:?}");
}

#[test]
fn compare_view_stays_after_the_replay_ends() {
    let mut app = played("cubic-vs-bbr.ndjson");
    assert!(app.playback.as_ref().unwrap().finished);
    key(&mut app, KeyCode::Char('c'));
    let text = lines(&render(&app, 120, 40, Theme { color: true })).join("\n");
    assert!(text.contains("cubic (1 flow)") && text.contains("bbr (1 flow)"), "{text}");
    assert!(!text.contains("Compare needs"), "{text}");
}

/// `demo fairness` in the dashboard: 1 BBR flow and 3 CUBIC flows on one link compare as two
/// sides, CUBIC's three flows added up (4 Mbit/s each, 12 in all, against BBR's 6).
#[test]
fn compare_view_adds_up_several_flows_of_one_algorithm() {
    let rate = |cookie: u64| if cookie == 1 { 6_000_000 } else { 4_000_000 };
    // Samples every 100 ms: a tenth of a second's bytes each.
    let mut app = synthetic(&[(1, "bbr"), (2, "cubic"), (3, "cubic"), (4, "cubic")], 20, |cookie, i| {
        format!(r#""srtt_us":50000,"min_rtt_us":40000,"cwnd":100,"bytes_acked":{}"#, i * rate(cookie) / 80)
    });
    key(&mut app, KeyCode::Char('c'));
    assert_eq!(app.view, View::Compare);
    let text = lines(&render(&app, 120, 40, Theme { color: false }));
    let joined = text.join("\n");
    assert!(joined.contains("cubic (3 flows)") && joined.contains("bbr (1 flow)"), "{joined}");
    let labels = y_labels(chart_rows(&text, "throughput (Mbit/s)"));
    let top: f64 = labels.iter().filter_map(|l| l.parse().ok()).fold(0.0, f64::max);
    assert!(top >= 12.0, "CUBIC's side is its flows' sum (12 Mbit/s); axis tops at {top}: {labels:?}\n{joined}");
}

#[test]
fn without_colour_the_compared_lines_differ_by_marker() {
    let mut app = mid_recording();
    key(&mut app, KeyCode::Char('c'));
    let text = lines(&render(&app, 120, 40, Theme { color: false }));
    let rows = chart_rows(&text, "throughput (Mbit/s)").join("\n");
    assert!(rows.contains("⣀ cubic (1 flow)") && rows.contains("• bbr (1 flow)"), "legend:\n{rows}");
    let plot: String = rows.lines().skip(3).collect();
    assert!(plot.contains('•'), "bbr's line in dots:\n{rows}");
    assert!(plot.chars().any(|c| ('\u{2801}'..='\u{28ff}').contains(&c)), "cubic's line in braille:\n{rows}");
}

/// Loopback: RTT 7.7 ms over a 10 µs minimum, no loss. 770x is a queue, not "healthy".
#[test]
fn extreme_rtt_inflation_is_not_called_healthy() {
    let app = synthetic(&[(1, "cubic")], 10, |_, i| {
        format!(
            r#""cwnd":100,"srtt_us":7700,"min_rtt_us":10,"bytes_acked":{},"retrans_total":0,"data_segs_out":{}"#,
            i * 250_000,
            i * 170
        )
    });
    let text = lines(&render(&app, 120, 40, Theme { color: true })).join("\n");
    let row = text.lines().find(|l| l.contains("10.0.0.2:443")).expect("the flow's row");
    assert!(row.contains("queueing") && !row.contains("healthy"), "{row}");
    assert!(text.contains("770.0x"), "{text}");
}

#[test]
fn at_80x24_the_charts_are_tall_enough_and_t_shows_the_others() {
    let mut app = mid_recording();
    let text = lines(&render(&app, 80, 24, Theme { color: false }));
    let rows = chart_rows(&text, "cwnd (packets)");
    // Title row, plot rows, axis line, x labels: at least five rows to plot in.
    assert!(rows.len() >= 8, "cwnd chart {} rows:\n{}", rows.len(), text.join("\n"));
    assert!(rows[0].contains("t: next chart"), "{}", rows[0]);
    key(&mut app, KeyCode::Char('t'));
    let text = lines(&render(&app, 80, 24, Theme { color: false }));
    assert!(chart_rows(&text, "RTT (").len() >= 8, "{}", text.join("\n"));
    key(&mut app, KeyCode::Char('t'));
    let text = lines(&render(&app, 80, 24, Theme { color: false }));
    assert!(chart_rows(&text, "rate (Mbit/s)").len() >= 8, "{}", text.join("\n"));
    // A tall terminal shows all three at once, without the hint.
    let text = lines(&render(&app, 120, 60, Theme { color: false })).join("\n");
    assert!(text.contains("cwnd (packets)") && text.contains("RTT (") && !text.contains("t: next chart"), "{text}");
}

#[test]
fn one_rate_unit_on_every_screen() {
    let mut app = mid_recording();
    for (w, h) in [(80, 24), (120, 40), (160, 50)] {
        for view in [View::Flows, View::Compare] {
            app.view = view;
            let text = lines(&render(&app, w, h, Theme { color: true })).join("\n");
            for ss_unit in ["Mbps", "Kbps", "Gbps", "kbps"] {
                assert!(!text.contains(ss_unit), "{ss_unit} beside Mbit/s at {w}x{h} {view:?}:\n{text}");
            }
            assert!(text.contains("bit/s"), "{text}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Replay input: damaged recordings and pipes.

#[test]
fn damaged_recording_replays_and_the_footer_counts_what_was_skipped() {
    let path = format!("{}/tests/fixtures/cubic-vs-bbr.ndjson", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines_in: Vec<&str> = text.lines().collect();
    lines_in.insert(100, "{\"type\":\"sample\",\"ts\":garbage");
    let last = lines_in.pop().unwrap();
    let damaged = format!("{}\n{}", lines_in.join("\n"), &last[..last.len() / 2]);
    let mut feed = Feed::from_reader(std::io::Cursor::new(damaged.into_bytes()));
    let mut app = Dash::new(App::new("damaged", Vec::new(), Some(Playback::new(1.0, false))));
    for _ in 0..100 {
        app.play(&mut feed, Duration::from_secs(3600));
        if app.playback.as_ref().unwrap().finished {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(app.playback.as_ref().unwrap().finished);
    assert_eq!(feed.skipped.lines, 2, "{:?}", feed.skipped);
    let text = lines(&render(&app, 120, 30, Theme { color: true })).join("\n");
    assert!(text.contains(" cubic ") && text.contains(" bbr "), "{text}");
    assert!(text.contains("2 unreadable lines skipped"), "{text}");
}

/// `bbrscope stream | bbrscope replay -`: what has arrived plays; the clock waits for the rest.
#[test]
fn a_pipe_plays_as_it_arrives() {
    use std::io::Write as _;
    let path = format!("{}/tests/fixtures/cubic-vs-bbr.ndjson", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(path).unwrap();
    let all: Vec<&str> = text.lines().collect();
    let (head, tail) = all.split_at(all.len() / 2);
    let (reader, mut writer) = std::io::pipe().unwrap();
    let mut feed = Feed::from_reader(std::io::BufReader::new(reader));
    writer.write_all((head.join("\n") + "\n").as_bytes()).unwrap();
    let mut app = Dash::new(App::new("-", Vec::new(), Some(Playback::new(64.0, false))));
    let waiting = |app: &Dash| app.playback.as_ref().unwrap().waiting;
    let start = std::time::Instant::now();
    while !(waiting(&app) && app.table.len() == 2) {
        assert!(start.elapsed() < Duration::from_secs(10), "the first half never played");
        app.play(&mut feed, Duration::from_secs(1));
        std::thread::sleep(Duration::from_millis(10));
    }
    let screen = lines(&render(&app, 120, 30, Theme { color: true })).join("\n");
    assert!(screen.contains("waiting for input") && screen.contains(" bbr "), "{screen}");
    assert!(!app.playback.as_ref().unwrap().finished);
    writer.write_all((tail.join("\n") + "\n").as_bytes()).unwrap();
    drop(writer);
    while !app.playback.as_ref().unwrap().finished {
        assert!(start.elapsed() < Duration::from_secs(20), "the second half never played");
        app.play(&mut feed, Duration::from_secs(1));
        std::thread::sleep(Duration::from_millis(10));
    }
    let screen = lines(&render(&app, 120, 30, Theme { color: true })).join("\n");
    assert!(screen.contains("replay end") && screen.contains("closed"), "{screen}");
}

// ---------------------------------------------------------------------------------------------
// Issue 11: a running experiment's view, from a recorded experiment (cubic vs bbr on a long lossy
// path, 198.18.64.0/24, and a short clean one, 198.18.65.0/24; bbrscope/tests/experiment.rs
// `record_the_fixture` made it).

/// The dashboard of an experiment 75 s into its 10 minutes, its analysis on the recorded flows:
/// the app and the experiment, its panel.
fn experiment_app() -> (Dash, bbrscope::experiment::progress::LiveExperiment) {
    use bbrscope::{
        experiment::{
            Observation,
            progress::{Analysed, Limit, LiveExperiment, Update},
            setup,
        },
        observe::kernel::loader::ExperimentSpec,
    };
    let path = format!("{}/tests/fixtures/experiment-two-populations.ndjson", env!("CARGO_MANIFEST_DIR"));
    let obs: Vec<Observation> = std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter_map(|l| Observation::from_summary(&serde_json::from_str(l).unwrap()))
        .collect();
    let spec = ExperimentSpec {
        arms: ["cubic", "bbr"].map(|a| bbrscope::experiment::Arm::parse(a).unwrap()),
        split_pct: 50,
        sample_pct: 100,
        port: Some(443),
        cgroup: None,
        dst: Vec::new(),
        salt: 0,
    };
    let mut x = LiveExperiment::new(
        &spec,
        bbrscope::experiment::setup::Design::PerConnection,
        Limit::Time(Duration::from_secs(600)),
        true,
    );
    for o in &obs {
        x.flow_finished(o.arm);
    }
    x.elapsed = Duration::from_secs(75);
    let setup = setup::Setup {
        arms: Some(["cubic".into(), "bbr".into()]),
        split_pct: 50,
        guardrail_pct: Some(20.0),
        ..setup::Setup::default()
    };
    x.update(Update {
        guard: setup::guardrail(&obs, &setup, bbrscope::experiment::guardrail::Held::default()),
        analysed: Some(Analysed {
            report: setup::report(&obs, &setup, None).0,
            flows: obs.len(),
            took: Duration::from_millis(12),
            at: Duration::from_secs(74),
        }),
    });
    (Dash::new(App::new("live", Vec::new(), None).with_panel("experiment")), x)
}

#[test]
fn experiment_view_shows_both_arms_the_groups_and_verdicts() {
    let (app, x) = experiment_app();
    assert_eq!(app.view, View::Panel, "an experiment's dashboard opens on its view");
    let text = lines(&render_with(&app, Some(&x), 120, 40, Theme { color: true })).join("\n");
    for want in [
        "cubic (A) vs bbr (B) · 50% to B · port 443 · 1:15 of 10:00 (8:45 left)",
        "guardrail",
        "all flows",
        "p95 completion 256 KB–4 MB",
        "retransmit rate",
        "p50 srtt",
        "95% interval",
        "198.18.64.0/24",
        "198.18.65.0/24",
        "RTT <10 ms",
        "RTT 50–150 ms",
        "q end the experiment",
    ] {
        assert!(text.contains(want), "'{want}' missing:\n{text}");
    }
    // The arms' columns carry the algorithms; the long lossy path's group has BBR faster, the
    // clean one not (the analysis's verdicts, as the text report gives them).
    let row = |label: &str| {
        text.lines().find(|l| l.starts_with(&format!("│{label}"))).unwrap_or_else(|| panic!("{label}:\n{text}"))
    };
    assert!(row("all flows").contains("cubic (A)") && row("all flows").contains("bbr (B)"), "{text}");
    assert!(row("198.18.64.0/24").contains("BBR faster"), "{text}");
    assert!(!row("198.18.65.0/24").contains("faster"), "{text}");
    // The answer with its interval.
    assert!(row("198.18.64.0/24").contains("% [−"), "{text}");
}

#[test]
fn experiment_view_is_readable_at_80x24_without_colour() {
    let (mut app, x) = experiment_app();
    let buf = render_with(&app, Some(&x), 80, 24, Theme { color: false });
    let text = lines(&buf);
    let all = text.join("\n");
    for y in 0..24 {
        for x in 0..80 {
            let c = &buf[(x, y)];
            assert!(c.fg == Color::Reset && c.bg == Color::Reset, "colour at {x},{y} with NO_COLOR");
        }
    }
    assert!(text[0].contains("experiment"), "{all}");
    assert!(text[23].contains("q end the experiment"), "footer: {}", text[23]);
    // Both arms, a completion time with B's difference and a whole interval, and the groups with
    // a verdict: all within 80 columns.
    assert!(all.contains("cubic (A)") && all.contains("bbr (B)"), "{all}");
    assert!(
        text.iter().any(|l| l.contains("p50 completion") && l.contains('[') && l.contains(']')),
        "no completion time with its interval:\n{all}"
    );
    assert!(all.contains("groups") && all.contains("BBR faster"), "{all}");
    // Five groups, four fit: ↓ scrolls them.
    let first_group = |t: &[String]| {
        let header = t.iter().position(|l| l.contains("flows A/B")).expect("the groups' header");
        t[header + 1].clone()
    };
    assert!(all.contains("groups (5; ↑↓ scroll)"), "{all}");
    assert!(first_group(&text).starts_with("│all flows "), "{all}");
    key(&mut app, KeyCode::Down);
    let after = lines(&render_with(&app, Some(&x), 80, 24, Theme { color: false }));
    assert!(first_group(&after).starts_with("│RTT <10 ms "), "{}", after.join("\n"));
}

#[test]
fn experiment_dashboard_keeps_the_flow_views_a_tab_away() {
    let (mut app, _) = experiment_app();
    key(&mut app, KeyCode::Tab);
    assert_eq!(app.view, View::Flows);
    key(&mut app, KeyCode::Tab);
    assert_eq!(app.view, View::Compare);
    key(&mut app, KeyCode::Tab);
    assert_eq!(app.view, View::Panel);
    key(&mut app, KeyCode::Char('c'));
    assert_eq!(app.view, View::Compare);
    key(&mut app, KeyCode::Char('e'));
    assert_eq!(app.view, View::Panel);
    key(&mut app, KeyCode::Char('?'));
    let text = lines(&render(&app, 100, 30, Theme { color: true })).join("\n");
    assert!(text.contains("experiment view"), "{text}");
    key(&mut app, KeyCode::Esc);
    // Without an experiment, e does nothing and Tab toggles flows and compare as before.
    let mut plain = played("cubic-vs-bbr.ndjson");
    key(&mut plain, KeyCode::Char('e'));
    assert_eq!(plain.view, View::Flows);
    key(&mut plain, KeyCode::Tab);
    key(&mut plain, KeyCode::Tab);
    assert_eq!(plain.view, View::Flows);
    assert_eq!(key(&mut app, KeyCode::Char('q')), Action::Quit);
}

/// Where a number with a unit is cut short in a line (`13.9Mb`, `4.9Mbi`, `63µ`, `25.4ms/1.3`):
/// the text after the cut, else None.
fn cut_unit(line: &str) -> Option<String> {
    let c: Vec<char> = line.chars().collect();
    let rest = |i: usize| c[i..].iter().collect::<String>();
    for i in 1..c.len() {
        if !c[i - 1].is_ascii_digit() {
            continue;
        }
        let ok = match c[i] {
            'k' | 'M' | 'G' if c.get(i + 1) == Some(&'b') => rest(i + 1).starts_with("bit/s"),
            'µ' | 'm' if c.get(i + 1).is_none_or(|n| !n.is_alphabetic()) => {
                rest(i).starts_with("µs") || rest(i).starts_with("ms")
            }
            _ => true,
        };
        if !ok {
            return Some(rest(i - 1));
        }
    }
    // RTT/MIN: the min after the slash keeps its unit.
    for (at, _) in line.match_indices("s/") {
        let after: String = line[at + 2..].chars().take_while(|ch| ch.is_ascii_digit() || *ch == '.').collect();
        if !after.is_empty() {
            let unit = &line[at + 2 + after.len()..];
            if !(unit.starts_with("ms") || unit.starts_with("µs")) {
                return Some(line[at..].to_string());
            }
        }
    }
    None
}

/// At any width from 64 to 160 columns no number on the screen is cut mid-unit: narrow tables
/// shorten rates (`13.9M` under `BIT/S`) and leave out RTT's min (under 75 columns also the
/// local port and retransmission rate), and the detail and footer lines drop whole parts; at 80
/// columns the flows' rates and RTTs are there, shortened.
#[test]
fn narrow_terminals_shorten_numbers_instead_of_cutting_them() {
    assert_eq!(cut_unit("13.9Mb 28"), Some("9Mb 28".into()));
    assert_eq!(cut_unit("18.5ms/63µ"), Some("3µ".into()));
    assert_eq!(cut_unit("25.4ms/1.3 3.5"), Some("s/1.3 3.5".into()));
    assert_eq!(cut_unit("13.9Mbit/s 18.5ms/63µs 925k 1.2 mode"), None);
    let app = played("cubic-vs-bbr.ndjson");
    for w in 64..=160 {
        for line in lines(&render(&app, w, 24, Theme { color: false })) {
            assert_eq!(cut_unit(&line), None, "at {w} columns: {line}");
        }
    }
    let text = lines(&render(&app, 80, 24, Theme { color: false }));
    let row = |cc: &str| text.iter().find(|l| l.contains(&format!(" {cc} "))).unwrap().clone();
    assert!(text[2].contains("BIT/S") && text[2].contains("RTT "), "{}", text[2]);
    // The rates are the last second's of each flow before it closed.
    assert!(row("bbr").contains(" 13.7M ") && row("bbr").contains(" 18.5ms "), "{}", row("bbr"));
    assert!(row("cubic").contains(" 5.37M ") && row("cubic").contains(" 25.4ms "), "{}", row("cubic"));
    // The detail's state line: BBR's state first, then what fits whole, and a mark for the rest.
    assert!(
        text.iter().any(|l| l.contains("│BBR probe_bw gain 1.00/2.00 bw 14.4Mbit/s · cwnd 28 ssthresh 140 · … ")),
        "{}",
        text.join("\n")
    );
}

/// Issue 39 (11): at 80x24 a BBR flow's mode, gains and bandwidth show (the first part of the
/// state line), and what a narrow terminal leaves out is said: the line ends in "…", the flow
/// list's title names the columns a wider terminal adds.
#[test]
fn at_80x24_bbrs_state_shows_and_what_is_cut_is_said() {
    let mut app = mid_recording();
    while app.selected_flow().unwrap().cc != "bbr" {
        key(&mut app, KeyCode::Down);
    }
    let text = lines(&render(&app, 80, 24, Theme { color: false }));
    let all = text.join("\n");
    let state = text.iter().find(|l| l.contains("│BBR ")).unwrap_or_else(|| panic!("no BBR state:\n{all}"));
    let mode = ["startup", "drain", "probe_bw", "probe_rtt"].iter().any(|m| state.contains(&format!("BBR {m} gain ")));
    assert!(mode && state.contains(" bw ") && state.contains("bit/s"), "{state}");
    assert!(state.trim_end_matches([' ', '│']).ends_with(" · …"), "the cut is marked: {state}");
    assert!(all.contains("RTT MIN PACING STATE at ≥120 columns"), "{all}");
    // Wide enough for everything: no mark, no hint.
    let text = lines(&render(&app, 200, 50, Theme { color: false })).join("\n");
    assert!(text.contains("BBR ") && !text.contains(" · …") && !text.contains("at ≥120 columns"), "{text}");
    assert!(text.contains("THRPUT 1s"), "{text}");
}
