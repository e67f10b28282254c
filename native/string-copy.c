/*
 * Copies the bytes of a DuckDB VARCHAR vector's strings into a buffer the caller reuses.
 *
 * @duckdb/node-bindings hands each run of string bytes to JS as a new ArrayBuffer (a malloc and a
 * copy per run); under a stream of big answers that fresh memory is most of a worker's page faults
 * and the external memory that starts V8's mark-compacts. With this, the engine copies a vector's
 * strings into slabs it recycles once the answer is on the socket (src/query/row-texts.ts).
 *
 * copyStrings(strings, validity, rows, first, slab, at, ends) -> rows copied
 *   strings:  the vector's duckdb_string_t array (16 bytes per row, from vector_get_data)
 *   validity: its validity bitmask, or null when every row is valid
 *   rows:     rows in the vector; copying starts at row `first`
 *   slab:     Uint8Array to copy into, from byte `at` on
 *   ends:     Float64Array; ends[i] = end offset in `slab` of row i's bytes (NULL rows are empty)
 * Stops before the first row that does not fit and returns how many rows (from `first`) it copied.
 */
#include <node_api.h>
#include <stdint.h>
#include <string.h>

#define CHECK(call) if ((call) != napi_ok) { napi_throw_error(env, NULL, "copyStrings: bad arguments"); return NULL; }

static napi_value copy_strings(napi_env env, napi_callback_info info) {
  size_t argc = 7;
  napi_value argv[7];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (argc != 7) { napi_throw_error(env, NULL, "copyStrings: 7 arguments"); return NULL; }

  napi_typedarray_type type;
  size_t strings_len, validity_len = 0, slab_len, ends_len;
  void *strings_p, *validity_p = NULL, *slab_p, *ends_p;
  CHECK(napi_get_typedarray_info(env, argv[0], &type, &strings_len, &strings_p, NULL, NULL));
  napi_valuetype vt;
  CHECK(napi_typeof(env, argv[1], &vt));
  if (vt != napi_null && vt != napi_undefined) CHECK(napi_get_typedarray_info(env, argv[1], &type, &validity_len, &validity_p, NULL, NULL));
  int64_t rows, first, at;
  CHECK(napi_get_value_int64(env, argv[2], &rows));
  CHECK(napi_get_value_int64(env, argv[3], &first));
  CHECK(napi_get_value_int64(env, argv[5], &at));
  CHECK(napi_get_typedarray_info(env, argv[4], &type, &slab_len, &slab_p, NULL, NULL));
  CHECK(napi_get_typedarray_info(env, argv[6], &type, &ends_len, &ends_p, NULL, NULL));
  if (type != napi_float64_array || rows < 0 || first < 0 || at < 0 || (size_t)at > slab_len ||
      strings_len < (size_t)rows * 16 || ends_len < (size_t)rows || (validity_p && validity_len * 8 < (size_t)rows)) {
    napi_throw_range_error(env, NULL, "copyStrings: sizes do not match");
    return NULL;
  }
  const uint8_t *strings = strings_p;
  const uint8_t *validity = validity_p;
  uint8_t *slab = slab_p;
  double *ends = ends_p;
  size_t pos = (size_t)at;
  int64_t i = first;
  for (; i < rows; i++) {
    if (validity && !((validity[i >> 3] >> (i & 7)) & 1)) {
      ends[i] = (double)pos;
      continue;
    }
    const uint8_t *s = strings + i * 16;
    uint32_t len;
    memcpy(&len, s, 4);
    if (len > slab_len - pos) break;
    if (len <= 12) {
      memcpy(slab + pos, s + 4, len);
    } else {
      const uint8_t *ptr;
      memcpy(&ptr, s + 8, sizeof ptr);
      memcpy(slab + pos, ptr, len);
    }
    pos += len;
    ends[i] = (double)pos;
  }
  napi_value out;
  CHECK(napi_create_int64(env, i - first, &out));
  return out;
}

NAPI_MODULE_INIT() {
  napi_value fn;
  if (napi_create_function(env, "copyStrings", NAPI_AUTO_LENGTH, copy_strings, NULL, &fn) != napi_ok) return NULL;
  if (napi_set_named_property(env, exports, "copyStrings", fn) != napi_ok) return NULL;
  return exports;
}
