//! ctl's tables (`ctl stats`, `ctl dead-letter list`), laid out by
//! comfy-table: no borders, columns two spaces apart, the columns named
//! right-aligned (numbers), trailing blanks trimmed.

use comfy_table::{CellAlignment, ContentArrangement, Table};

/// `rows` under `header`; `right` lists the columns aligned right.
pub fn render(header: &[&str], rows: &[Vec<String>], right: &[usize]) -> String {
    let mut table = Table::new();
    table
        .load_preset(comfy_table::presets::NOTHING)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header(header.to_vec());
    for row in rows {
        table.add_row(row.clone());
    }
    let last = header.len().saturating_sub(1);
    for (i, column) in table.column_iter_mut().enumerate() {
        column.set_padding((0, if i == last { 0 } else { 2 }));
        if right.contains(&i) {
            column.set_cell_alignment(CellAlignment::Right);
        }
    }
    let mut out = table.trim_fmt();
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_two_spaces_apart_and_numbers_align_right() {
        let rows = vec![
            vec!["a".to_string(), "1".to_string(), "x".to_string()],
            vec!["bbb".to_string(), "1,000".to_string(), "".to_string()],
        ];
        assert_eq!(
            render(&["NAME", "N", "NOTE"], &rows, &[1]),
            "NAME      N  NOTE\na         1  x\nbbb   1,000\n"
        );
    }
}
