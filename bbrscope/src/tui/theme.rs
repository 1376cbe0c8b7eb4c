//! Colours, or none: honours NO_COLOR (no-color.org) by falling back to bold/dim/reverse only.

use ratatui::style::{Color, Modifier, Style};

#[derive(Clone, Copy, Debug)]
pub struct Theme {
    pub color: bool,
}

impl Theme {
    pub(crate) fn from_env() -> Self {
        Theme { color: std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()) }
    }

    pub(crate) fn fg(&self, c: Color) -> Style {
        if self.color { Style::default().fg(c) } else { Style::default() }
    }

    pub(crate) fn title(&self) -> Style {
        self.fg(Color::Cyan).add_modifier(Modifier::BOLD)
    }

    pub(crate) fn dim(&self) -> Style {
        if self.color { Style::default().fg(Color::DarkGray) } else { Style::default().add_modifier(Modifier::DIM) }
    }

    pub(crate) fn selected(&self) -> Style {
        if self.color {
            Style::default().bg(Color::Rgb(40, 60, 90)).add_modifier(Modifier::BOLD)
        } else {
            Style::default().add_modifier(Modifier::REVERSED)
        }
    }

    pub(crate) fn warn(&self) -> Style {
        self.fg(Color::Yellow).add_modifier(Modifier::BOLD)
    }

    pub(crate) fn bad(&self) -> Style {
        self.fg(Color::Red).add_modifier(Modifier::BOLD)
    }

    pub(crate) fn good(&self) -> Style {
        self.fg(Color::Green)
    }

    /// A colour per algorithm, so CUBIC and BBR read apart everywhere.
    pub(crate) fn cc(&self, cc: &str) -> Style {
        match cc {
            "bbr" | "bbr2" | "bbr3" => self.fg(Color::Green),
            "cubic" => self.fg(Color::Magenta),
            "reno" => self.fg(Color::Yellow),
            _ => self.fg(Color::White),
        }
    }
}
