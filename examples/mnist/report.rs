//! What the example prints: progress lines during an epoch, one line per epoch.

use std::io::{IsTerminal, Write};

pub struct EpochLine {
    pub epoch: usize,
    pub epochs: usize,
    pub loss: f64,
    pub train_accuracy: f64,
    pub test_accuracy: f64,
    /// `None` under policies that need no loss scaling.
    pub loss_scale: Option<f32>,
    pub skipped: u64,
    pub seconds: f64,
}

impl EpochLine {
    pub fn print(&self) {
        clear_progress();
        println!(
            "epoch {}/{}  loss {:.4}  train_acc {:.4}  test_acc {:.4}  loss_scale {}  skipped {}  time {:.1}s",
            self.epoch,
            self.epochs,
            self.loss,
            self.train_accuracy,
            self.test_accuracy,
            self.loss_scale.map_or("-".to_string(), |s| s.to_string()),
            self.skipped,
            self.seconds
        );
    }
}

/// A progress line: rewritten in place on a terminal, else printed every tenth of an epoch.
pub struct Progress {
    last_tenth: usize,
}

impl Progress {
    pub fn new() -> Self {
        Self { last_tenth: 0 }
    }

    pub fn update(&mut self, epoch: usize, done: usize, total: usize, loss: Option<f64>) {
        let loss = loss.map(|l| format!("  loss {l:.4}")).unwrap_or_default();
        if std::io::stdout().is_terminal() {
            print!("\r  epoch {epoch} [{done:>5}/{total}]{loss}   ");
            let _ = std::io::stdout().flush();
        } else {
            let tenth = done * 10 / total.max(1);
            if tenth > self.last_tenth && done < total {
                self.last_tenth = tenth;
                println!("  epoch {epoch} [{done:>5}/{total}]{loss}");
            }
        }
    }
}

fn clear_progress() {
    if std::io::stdout().is_terminal() {
        print!("\r{:70}\r", "");
    }
}
