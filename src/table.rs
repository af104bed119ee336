//! Aligned text tables for the operator's commands: a header row in
//! capitals, then rows, each column as wide as its widest cell, separated
//! by two spaces (the layout of Kafka's `kafka-consumer-groups.sh`).
//! An empty cell is printed as `-`, so every row splits into the same
//! number of whitespace-separated fields.

/// A table being filled.
#[derive(Debug, Clone)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Self {
        Self {
            header: header.iter().map(|h| (*h).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; missing cells are empty, extra cells are dropped.
    pub fn row(&mut self, cells: Vec<String>) {
        let mut cells: Vec<String> = cells
            .into_iter()
            .map(|c| if c.is_empty() { "-".to_owned() } else { c })
            .collect();
        cells.resize(self.header.len(), "-".to_owned());
        self.rows.push(cells);
    }

    /// The table as text, one line per row, header first.
    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (w, c) in widths.iter_mut().zip(row) {
                *w = (*w).max(c.chars().count());
            }
        }
        let mut out = String::new();
        for row in std::iter::once(&self.header).chain(&self.rows) {
            let mut line = String::new();
            for (i, (c, w)) in row.iter().zip(&widths).enumerate() {
                if i + 1 == row.len() {
                    line.push_str(c);
                } else {
                    line.push_str(&format!("{c:<w$}  "));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// An optional number as a cell (`-` when unknown).
pub fn cell(n: Option<i64>) -> String {
    n.map_or_else(|| "-".to_owned(), |n| n.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_aligned_and_empty_cells_are_dashes() {
        let mut t = Table::new(&["GROUP", "LAG", "HOST"]);
        t.row(vec!["g".into(), "12".into(), String::new()]);
        t.row(vec!["longer".into(), cell(None)]);
        assert_eq!(
            t.render(),
            "GROUP   LAG  HOST\ng       12   -\nlonger  -    -\n"
        );
    }
}
