// SPDX-License-Identifier: Apache-2.0
// The LMDB side of store format upgrades (store/format.hpp's init_meta): the
// databases formats 1-2 kept, dropped or absorbed into `rows`.
#include <string>

#include "store/lmdb_txn.hpp"

namespace agentstate::store::lmdb_detail {

void lmdb_write::drop_table(std::string_view name) {
  std::string n(name);
  MDB_dbi dbi;
  int rc = ::mdb_dbi_open(top(), n.c_str(), 0, &dbi);
  if (rc == MDB_NOTFOUND)
    return;
  check("mdb_dbi_open", rc);
  check("mdb_drop", guarded_call("mdb_drop", [&] { return ::mdb_drop(top(), dbi, 1); }));
}
void lmdb_write::absorb_table(table t) {
  auto i = static_cast<int>(t);
  if (h_.tag[i] < 0)
    return;
  MDB_dbi old;
  int rc = ::mdb_dbi_open(top(), table_name(t), 0, &old);
  if (rc == MDB_NOTFOUND)
    return;
  check("mdb_dbi_open", rc);
  {
    cursor_guard c(top(), old);
    MDB_val k, v;
    auto step = [&](MDB_cursor_op op) {
      return guarded_call("mdb_cursor_get", [&] { return ::mdb_cursor_get(c.get(), &k, &v, op); });
    };
    rc = step(MDB_FIRST);
    while (rc == MDB_SUCCESS) {
      stored_key sk(h_.tag[i], view(k));
      MDB_val nk = sk.val();
      view(v);
      check("mdb_put",
            guarded_call("mdb_put", [&] { return ::mdb_put(top(), h_.dbi[i], &nk, &v, 0); }));
      rc = step(MDB_NEXT);
    }
    if (rc != MDB_NOTFOUND)
      fail("mdb_cursor_get", rc);
  }
  check("mdb_drop", guarded_call("mdb_drop", [&] { return ::mdb_drop(top(), old, 1); }));
}

} // namespace agentstate::store::lmdb_detail
