//! What the demo shows while it runs: the dashboard on a terminal (its compare view, on the
//! demo's flows only), progress lines on stderr when output is not a terminal, nothing with
//! `--headless`.

use std::{io::IsTerminal as _, time::Duration};

use anyhow::Result;
use ratatui::crossterm::event::{KeyCode, KeyModifiers};

use super::{
    progress::{self, Progress, Row},
    run::Stop,
};
use crate::{
    observe::{clock::Clock, flow::FlowTable},
    tui::{
        self, Dashboard,
        app::{Action, App, View, WINDOWS},
    },
};

pub(crate) enum Display {
    Off,
    Lines(Progress),
    Dashboard(Box<Dashboard>, Box<App>),
}

impl Display {
    /// `run` is how long each round lasts: the charts show a whole round.
    pub(crate) fn new(headless: bool, notices: Vec<String>, run: Duration) -> Result<Self> {
        if headless {
            return Ok(Display::Off);
        }
        if !std::io::stdout().is_terminal() {
            return Ok(Display::Lines(Progress::default()));
        }
        let mut app = App::new("demo", notices, None);
        app.view = View::Compare;
        app.window = WINDOWS.iter().position(|&w| w >= run.as_secs()).unwrap_or(WINDOWS.len() - 1);
        Ok(Display::Dashboard(Box::new(Dashboard::new()?), Box::new(app)))
    }

    /// How often to call [`Display::draw`].
    pub(crate) fn period(&self) -> Duration {
        match self {
            Display::Dashboard(..) => Duration::from_millis(1000 / tui::FPS),
            _ => progress::PERIOD,
        }
    }

    /// Shows the round: `rows` on a progress line, `table` in the dashboard.
    pub(crate) fn draw(
        &mut self,
        label: &str,
        elapsed: Duration,
        total: Duration,
        rows: &[Row],
        table: &FlowTable,
    ) -> Result<()> {
        match self {
            Display::Off => Ok(()),
            Display::Lines(p) => {
                p.draw(label, elapsed, total, rows);
                Ok(())
            }
            Display::Dashboard(dash, app) => {
                app.source = format!("{label} · {:.0}/{:.0} s", elapsed.as_secs_f64(), total.as_secs_f64());
                app.tick(Clock::monotonic_ns(), table);
                dash.draw(app, table, None)
            }
        }
    }

    /// The dashboard's next input; never completes without a dashboard.
    pub(crate) async fn input(&mut self) -> tui::Input {
        match self {
            Display::Dashboard(dash, _) => dash.input().await,
            _ => std::future::pending().await,
        }
    }

    /// What `input` does to the dashboard showing `table`; whether the user asked to stop: q (a
    /// normal end) or Ctrl-C, which in the dashboard's raw mode is a key rather than SIGINT and
    /// means the same as the signal. Other keys work as in `bbrscope top`.
    pub(crate) fn key(&mut self, input: tui::Input, table: &FlowTable) -> Result<Option<Stop>> {
        let Display::Dashboard(dash, app) = self else { return Ok(None) };
        let ctrl_c = matches!(&input, tui::Input::Key(k)
            if k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL));
        if tui::handle(app, input, table) == Action::Quit {
            return Ok(Some(if ctrl_c { Stop::Interrupted("Ctrl-C") } else { Stop::Quit }));
        }
        dash.draw(app, table, None)?;
        Ok(None)
    }

    /// Removes live output before the summary is printed (the dashboard leaves the screen when
    /// the display is dropped).
    pub(crate) fn clear(&mut self) {
        if let Display::Lines(p) = self {
            p.clear();
        }
    }
}
