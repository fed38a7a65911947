//! Plain-text result tables.

use std::fmt;

/// A titled table of strings, printed with aligned columns (numbers right,
/// the first column left).
#[derive(Debug, Clone, Default)]
pub struct Table {
    /// Shown above the table.
    pub title: String,
    /// Column headers.
    pub header: Vec<String>,
    /// Rows; each as long as `header`.
    pub rows: Vec<Vec<String>>,
    /// Lines shown under the table (units, caveats).
    pub notes: Vec<String>,
}

impl Table {
    /// An empty table with a title and headers.
    pub fn new(title: impl Into<String>, header: &[&str]) -> Self {
        Table {
            title: title.into(),
            header: header.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// Appends a row.
    pub fn row(&mut self, cells: Vec<String>) {
        debug_assert_eq!(cells.len(), self.header.len());
        self.rows.push(cells);
    }

    /// Appends a note line.
    pub fn note(&mut self, s: impl Into<String>) {
        self.notes.push(s.into());
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cols = self.header.len();
        let mut width: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for r in &self.rows {
            for (w, c) in width.iter_mut().zip(r) {
                *w = (*w).max(c.chars().count());
            }
        }
        writeln!(f, "{}", self.title)?;
        let line = |f: &mut fmt::Formatter<'_>, cells: &[String]| -> fmt::Result {
            for (i, (c, w)) in cells.iter().zip(&width).enumerate() {
                let sep = if i + 1 == cols { "" } else { "  " };
                if i == 0 {
                    write!(f, "{c:<w$}{sep}")?;
                } else {
                    write!(f, "{c:>w$}{sep}")?;
                }
            }
            writeln!(f)
        };
        line(f, &self.header)?;
        let rule: Vec<String> = width.iter().map(|&w| "-".repeat(w)).collect();
        line(f, &rule)?;
        for r in &self.rows {
            line(f, r)?;
        }
        for n in &self.notes {
            writeln!(f, "  {n}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligns() {
        let mut t = Table::new("T", &["name", "ms"]);
        t.row(vec!["a".into(), "1.5".into()]);
        t.row(vec!["long".into(), "10.25".into()]);
        t.note("n");
        assert_eq!(
            t.to_string(),
            "T\nname     ms\n----  -----\na       1.5\nlong  10.25\n  n\n"
        );
    }
}
