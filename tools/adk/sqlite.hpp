// SPDX-License-Identifier: Apache-2.0
// tools/adk/sqlite.hpp: the SQLite calls the ADK import and export share:
/// owning handles, statements, errors, column reads and table introspection.
/// Every function reports SQLite's failures as io_error values; none throws.
#pragma once

#include <sqlite3.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "agentstate/error.hpp"

namespace agentstate::tools::adk {

/// Owning handles: the database closes and the statement finalizes on destruction.
struct db_closer {
  void operator()(sqlite3* d) const noexcept { sqlite3_close_v2(d); }
};
struct stmt_closer {
  void operator()(sqlite3_stmt* s) const noexcept { sqlite3_finalize(s); }
};
using db_ptr = std::unique_ptr<sqlite3, db_closer>;
using stmt_ptr = std::unique_ptr<sqlite3_stmt, stmt_closer>;

/// A column as PRAGMA table_info reports it.
struct column_info {
  std::string name, type;
};

/// io_error naming `what` and SQLite's message for `db`.
error sql_error(sqlite3* db, const std::string& what);

/// A prepared statement of `sql`. Errors: io_error.
result<stmt_ptr> prepare(sqlite3* db, const std::string& sql);

/// Runs `sql` (any number of statements, no rows expected). Errors: io_error.
result<void> exec(sqlite3* db, const std::string& sql);

/// Column `i` of the current row as its bytes (BLOB or TEXT), "" for NULL.
std::string column_bytes(sqlite3_stmt* s, int i);

/// Column `i` of the current row as text, "" for NULL.
std::string column_text(sqlite3_stmt* s, int i);

/// Reads TEXT and BLOB cells of one column of a rowid table by rowid,
/// through SQLite's incremental I/O: a cell's size is known before any of
/// its bytes is read, so a cell over the caller's cap costs no memory (a
/// SELECT of the column would materialise it whole). One open handle is
/// moved from row to row. Must be destroyed before the database closes.
class cell_reader {
public:
  cell_reader(sqlite3* db, std::string table, std::string column)
    : db_(db), table_(std::move(table)), column_(std::move(column)) {}
  ~cell_reader();
  cell_reader(const cell_reader&) = delete;
  cell_reader& operator=(const cell_reader&) = delete;

  /// The bytes of the cell at `rowid` (which must hold TEXT or a BLOB) in
  /// `out`; false, with `out` untouched and `size` set, when it holds more
  /// than `cap` bytes. Errors: io_error / internal (SQLite's).
  result<bool> read(sqlite3_int64 rowid, std::size_t cap, std::string& out, std::size_t& size);

  const std::string& column() const noexcept { return column_; }

private:
  sqlite3* db_;
  std::string table_, column_;
  sqlite3_blob* blob_ = nullptr;
};

/// The storage class (SQLITE_TEXT, ...) that SQL's typeof() names as `name`.
int storage_class(std::string_view name);

/// SQLite's name of a storage class (SQLITE_INTEGER, ...), for messages.
const char* type_name(int t);

/// The columns of `table` in declaration order (empty when there is no such table). Errors: io_error.
result<std::vector<column_info>> columns_of(sqlite3* db, const std::string& table);

/// The column called `name`, or null.
const column_info* find_column(const std::vector<column_info>& cols, const char* name);

/// ASCII case-insensitive equality (SQL type names).
bool iequals(std::string_view a, std::string_view b);

} // namespace agentstate::tools::adk
