// SPDX-License-Identifier: Apache-2.0
#include "tools/adk/sqlite.hpp"

#include <cctype>

namespace agentstate::tools::adk {

error sql_error(sqlite3* db, const std::string& what) {
  int rc = sqlite3_extended_errcode(db);
  errc code = (rc & 0xff) == SQLITE_IOERR || (rc & 0xff) == SQLITE_FULL
      || (rc & 0xff) == SQLITE_CANTOPEN || (rc & 0xff) == SQLITE_BUSY
      || (rc & 0xff) == SQLITE_LOCKED || (rc & 0xff) == SQLITE_READONLY
    ? errc::io_error
    : errc::internal;
  return error{code, what + ": " + sqlite3_errmsg(db)};
}

result<stmt_ptr> prepare(sqlite3* db, const std::string& sql) {
  sqlite3_stmt* s = nullptr;
  if (sqlite3_prepare_v2(db, sql.c_str(), static_cast<int>(sql.size()), &s, nullptr) != SQLITE_OK)
    return sql_error(db, "SQLite refused '" + sql.substr(0, 60) + "'");
  return stmt_ptr(s);
}

result<void> exec(sqlite3* db, const std::string& sql) {
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK)
    return sql_error(db, "SQLite failed on '" + sql.substr(0, 60) + "'");
  return {};
}

std::string column_bytes(sqlite3_stmt* s, int i) {
  const void* p = sqlite3_column_blob(s, i);
  int n = sqlite3_column_bytes(s, i);
  return p ? std::string(static_cast<const char*>(p), static_cast<std::size_t>(n)) : std::string();
}

std::string column_text(sqlite3_stmt* s, int i) {
  const unsigned char* p = sqlite3_column_text(s, i);
  int n = sqlite3_column_bytes(s, i);
  return p ? std::string(reinterpret_cast<const char*>(p), static_cast<std::size_t>(n))
           : std::string();
}

cell_reader::~cell_reader() {
  if (blob_)
    sqlite3_blob_close(blob_);
}

result<bool> cell_reader::read(sqlite3_int64 rowid, std::size_t cap, std::string& out,
                               std::size_t& size) {
  int rc = blob_
    ? sqlite3_blob_reopen(blob_, rowid)
    : sqlite3_blob_open(db_, "main", table_.c_str(), column_.c_str(), rowid, 0, &blob_);
  if (rc != SQLITE_OK) {
    auto e =
      sql_error(db_, "reading " + table_ + "." + column_ + " of row " + std::to_string(rowid));
    // A handle whose reopen failed is aborted: only closing it is left.
    if (blob_)
      sqlite3_blob_close(blob_);
    blob_ = nullptr;
    return e;
  }
  size = static_cast<std::size_t>(sqlite3_blob_bytes(blob_));
  if (size > cap)
    return false;
  std::string bytes(size, '\0');
  if (size > 0 && sqlite3_blob_read(blob_, bytes.data(), static_cast<int>(size), 0) != SQLITE_OK)
    return sql_error(db_, "reading " + table_ + "." + column_ + " of row " + std::to_string(rowid));
  out = std::move(bytes);
  return true;
}

int storage_class(std::string_view name) {
  if (name == "integer")
    return SQLITE_INTEGER;
  if (name == "real")
    return SQLITE_FLOAT;
  if (name == "text")
    return SQLITE_TEXT;
  if (name == "blob")
    return SQLITE_BLOB;
  return SQLITE_NULL;
}

const char* type_name(int t) {
  switch (t) {
    case SQLITE_INTEGER: return "an integer";
    case SQLITE_FLOAT: return "a real";
    case SQLITE_TEXT: return "text";
    case SQLITE_BLOB: return "a blob";
    default: return "null";
  }
}

result<std::vector<column_info>> columns_of(sqlite3* db, const std::string& table) {
  auto s = prepare(db, "PRAGMA table_info(\"" + table + "\")");
  if (!s)
    return s.err();
  std::vector<column_info> out;
  int rc;
  while ((rc = sqlite3_step(s->get())) == SQLITE_ROW)
    out.push_back({column_text(s->get(), 1), column_text(s->get(), 2)});
  if (rc != SQLITE_DONE)
    return sql_error(db, "reading the columns of " + table);
  return out;
}

const column_info* find_column(const std::vector<column_info>& cols, const char* name) {
  for (auto& c : cols)
    if (c.name == name)
      return &c;
  return nullptr;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size())
    return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i]))
        != std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}

// One pass: a merge of the sessions (ordered by key) with the events (ordered
// by session key, then ADK's order), then user_states and app_states.

} // namespace agentstate::tools::adk
