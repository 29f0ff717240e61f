//! What a run prints: a progress bar (rewritten in place on a terminal, a line every 5% of
//! the run otherwise) with loss, tokens/s, loss scale and skipped steps, and a line per
//! validation.

use std::io::{IsTerminal, Write};

pub struct Progress {
    steps: usize,
    terminal: bool,
    last_twentieth: usize,
}

/// One update: the state after a step.
pub struct Status {
    pub step: usize,
    /// Mean training loss of the recent steps.
    pub loss: f64,
    pub tokens_per_second: f64,
    /// `None` under policies that need no loss scaling.
    pub loss_scale: Option<f32>,
    pub skipped: u64,
}

impl Progress {
    pub fn new(steps: usize) -> Self {
        Self {
            steps,
            terminal: std::io::stdout().is_terminal(),
            last_twentieth: 0,
        }
    }

    pub fn update(&mut self, status: &Status) {
        let line = self.line(status);
        if self.terminal {
            print!("\r{line}");
            let _ = std::io::stdout().flush();
        } else {
            let twentieth = status.step * 20 / self.steps.max(1);
            if twentieth > self.last_twentieth {
                self.last_twentieth = twentieth;
                println!("{line}");
            }
        }
    }

    fn line(&self, s: &Status) -> String {
        const WIDTH: usize = 24;
        let filled = s.step * WIDTH / self.steps.max(1);
        let bar: String = (0..WIDTH)
            .map(|i| if i < filled { '#' } else { '.' })
            .collect();
        format!(
            "  [{bar}] step {:>5}/{}  loss {:.4}  {:>7.0} tok/s  loss scale {}  skipped {}  ",
            s.step,
            self.steps,
            s.loss,
            s.tokens_per_second,
            s.loss_scale.map_or("-".into(), |x| x.to_string()),
            s.skipped
        )
    }

    /// A validation line, on its own line.
    pub fn validation(&mut self, step: usize, train_loss: f64, valid_loss: f32) {
        self.clear();
        println!("  step {step:>5}: train loss {train_loss:.4}  validation loss {valid_loss:.4}");
    }

    pub fn clear(&self) {
        if self.terminal {
            print!("\r{:110}\r", "");
        }
    }
}
