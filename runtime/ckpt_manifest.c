/* ckpt_manifest.c — a checkpoint's manifest.json (schema versions 2 to
 * 6), written and read, the match of what it lists with the program, the
 * notes of a resume (precision, build), and the program's build record
 * that every manifest carries.
 *
 * Schema. A manifest (DIR/step-N/manifest.json, ckdir.c) holds the format
 * and its version, the run's identity, the step, the seed (a decimal
 * string: it may exceed what JSON readers hold exactly), the program's
 * source and compiler, its optimizer with every hyperparameter
 * (gslrt_declare_optimizer; "none" for a program that does not train),
 * the precision it was compiled with ("f32" or "bf16", gslc --precision;
 * format version 3, a version 2 manifest has none and reads as "f32"),
 * the training signals at the step (gslrt_declare_signal: "signals", an
 * object of numbers, null where not finite, e.g. {"lr": 0.0003,
 * "grad_norm": 0.87}; empty for a program that reports none; format
 * version 4: versions 2 and 3 have none and still read),
 * the program's build record (gslrt_program_info.build, parsed once at the
 * start: "build", the object as gslc wrote it, {} for a program without
 * one; format version 5: version 4 and older have none and still read),
 * the provenance of the run that wrote it (provenance.c: the user, each
 * rank's host, gslc's version, the sources' and the binary's SHA-256,
 * argv and the start time; "provenance", the object its first --metrics
 * record also holds; format version 6: version 5 and older have none and
 * still read; resuming reads none of it),
 * the mesh it was saved on, every cycling --input's batch count and
 * position, and per tensor its name, kind, dtype, global shape, file, size
 * and zlib crc32 (of the whole file, in decimal).
 *
 * Manifests are written and read with jansson: any valid JSON layout reads,
 * and every field is checked by type and range (integers whole, strings
 * from their sets, no key twice, nothing after the document, the step equal
 * to the directory's); a failure names the field.
 *
 * The manifest written is indented by two, each object of an array of
 * several on a line of its own (dump_doc), every key and value encoded by
 * jansson; a temporary beside it is fsync'd and renamed into place. */
#include "ckpt.h"
#include "seterr.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CKPT_VERSION 6             /* manifest format version written */
#define CKPT_VERSION_OLD 2         /* the oldest still read (no "precision": f32; no "signals") */
#define CKPT_VERSION_PRECISION 3   /* the first with "precision" (no "signals") */
#define CKPT_VERSION_SIGNALS 4     /* the first with "signals" (no "build") */
#define CKPT_VERSION_BUILD 5       /* the first with "build" (no "provenance") */

/* The program's precision as a manifest names it: "f32" or "bf16". */
static const char *precision_name(const gslrt_ctx *ctx) { return gslrt_dtype_name(ctx->info->precision); }

/* ---- the program's build record ------------------------------------------- */

void gslrt_checkpoint_build(gslrt_ctx *ctx) {
  json_error_t je;
  json_t *b;
  if (!ctx->info->build)
    return;
  if (!(b = json_loads(ctx->info->build, JSON_REJECT_DUPLICATES, &je))) {
    for (char *c = je.text; *c; c++) /* kept to one printable line */
      if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e)
        *c = '?';
    gslrt_fail_all(ctx, "the program's build record (gslrt_program_info.build) is not JSON (%d:%d: %s): a bug "
                   "of the gslc that compiled it (%s), not of the program; report it", je.line, je.column,
                   je.text, ctx->info->compiler_version ? ctx->info->compiler_version : "?");
  }
  if (!json_is_object(b)) {
    json_decref(b);
    gslrt_fail_all(ctx, "the program's build record (gslrt_program_info.build) is JSON but not an object: a bug "
                   "of the gslc that compiled it (%s), not of the program; report it",
                   ctx->info->compiler_version ? ctx->info->compiler_version : "?");
  }
  ctx->build = b;
}

void gslrt_checkpoint_free(gslrt_ctx *ctx) {
  json_decref(ctx->build);
  ctx->build = NULL;
}

/* ---- writing the manifest --------------------------------------------------- */

/* Sets obj's key to v (a new reference); whether it took. */
static int put(json_t *obj, const char *key, json_t *v) { return v && json_object_set_new(obj, key, v) == 0; }

/* The manifest of the checkpoint of step done, as a JSON document (NULL
 * when out of memory). */
static json_t *manifest_doc(gslrt_ctx *ctx, int64_t done, const int64_t *crc, const int64_t *bytes) {
  json_t *doc = json_object(), *mesh = json_array(), *inputs = json_array(), *tensors = json_array();
  char seed[32], shape_file[CKDIR_PATH];
  int ok = doc && mesh && inputs && tensors, k = 0;
  snprintf(seed, sizeof seed, "%llu", (unsigned long long)ctx->seed);
  ok = ok && put(doc, "format", json_string("gsl-checkpoint")) && put(doc, "version", json_integer(CKPT_VERSION)) &&
       put(doc, "run", json_string(ctx->run_id)) && put(doc, "step", json_integer(done)) &&
       put(doc, "seed", json_string(seed)) &&
       put(doc, "program", json_string(ctx->info->source ? ctx->info->source : "")) &&
       put(doc, "compiler", json_string(ctx->info->compiler_version ? ctx->info->compiler_version : "")) &&
       put(doc, "optimizer", json_string(ctx->optimizer ? ctx->optimizer : "none")) &&
       put(doc, "precision", json_string(precision_name(ctx))) &&
       put(doc, "build", ctx->build ? json_incref(ctx->build) : json_object()) &&
       put(doc, "provenance", ctx->provenance ? json_incref(ctx->provenance) : json_object());
  json_t *signals = json_object();
  ok = ok && signals && put(doc, "signals", signals);
  for (int i = 0; ok && i < ctx->nsignals; i++) {
    const gslrt_signal *s = &ctx->signals[i];
    if (!s->have)
      continue;
    if (!s->count) {
      ok = put(signals, s->name, isfinite(s->value[0]) ? json_real(s->value[0]) : json_null());
      continue;
    }
    json_t *arr = json_array();
    ok = arr && put(signals, s->name, arr);
    for (int32_t j = 0; ok && j < s->count; j++)
      ok = json_array_append_new(arr, isfinite(s->value[j]) ? json_real(s->value[j]) : json_null()) == 0;
  }
  for (int a = 0; ok && a < ctx->naxes; a++) {
    json_t *ax = json_object();
    ok = json_array_append_new(mesh, ax) == 0 && put(ax, "axis", json_string(ctx->axis_name[a])) &&
         put(ax, "size", json_integer(ctx->axis_size[a]));
  }
  for (int i = 0; ok && i < ctx->ntensors; i++) {
    const gslrt_tensor *t = &ctx->tensors[i];
    json_t *in = json_object();
    if (t->kind != GSLRT_INPUT || !t->batches) {
      json_decref(in);
      continue;
    }
    ok = json_array_append_new(inputs, in) == 0 && put(in, "name", json_string(t->name)) &&
         put(in, "batches", json_integer(t->batches)) && put(in, "position", json_integer(done % t->batches));
  }
  for (int i = 0; ok && i < ctx->ntensors; i++) {
    const gslrt_tensor *t = &ctx->tensors[i];
    json_t *te = json_object(), *shape = json_array();
    if (!is_saved(t)) {
      json_decref(te), json_decref(shape);
      continue;
    }
    snprintf(shape_file, sizeof shape_file, "%s.npy", t->name);
    ok = json_array_append_new(tensors, te) == 0 && put(te, "name", json_string(t->name)) &&
         put(te, "kind", json_string(kind_name(t->kind))) && put(te, "dtype", json_string(gslrt_dtype_name(t->dtype))) &&
         put(te, "shape", shape);
    for (int32_t d = 0; ok && d < t->rank; d++)
      ok = json_array_append_new(shape, json_integer(t->global_shape[d])) == 0;
    ok = ok && put(te, "file", json_string(shape_file)) && put(te, "bytes", json_integer(bytes[k])) &&
         put(te, "crc32", json_integer(crc[k]));
    k++;
  }
  ok = ok && put(doc, "mesh", mesh) && put(doc, "inputs", inputs) && put(doc, "tensors", tensors);
  if (!ok) {
    json_decref(doc);
    return NULL;
  }
  return doc;
}

/* Writes doc, an object, as JSON indented by two, each element of an array
 * of several objects on a line of its own (a manifest a person can read
 * and diff); every key and value is encoded by jansson. */
static int dump_doc(FILE *f, json_t *doc) {
  const char *key;
  json_t *v;
  int first = 1, rc = 0;
  fputc('{', f);
  json_object_foreach(doc, key, v) {
    json_t *k = json_string(key);
    fputs(first ? "\n  " : ",\n  ", f);
    first = 0;
    rc |= json_dumpf(k, f, JSON_ENCODE_ANY);
    json_decref(k);
    fputs(": ", f);
    if (json_is_array(v) && json_array_size(v) > 1 && json_is_object(json_array_get(v, 0))) {
      size_t i;
      json_t *e;
      fputc('[', f);
      json_array_foreach(v, i, e) {
        fputs(i ? ",\n    " : "\n    ", f);
        rc |= json_dumpf(e, f, 0);
      }
      fputs("\n  ]", f);
    } else {
      rc |= json_dumpf(v, f, JSON_ENCODE_ANY);
    }
  }
  fputs("\n}\n", f);
  return rc;
}

int gslrt_ckpt_write_manifest(gslrt_ctx *ctx, const char *tmp, int64_t done, const int64_t *crc,
                              const int64_t *bytes, char *err) {
  char path[CKDIR_PATH], part[CKDIR_PATH];
  json_t *doc = manifest_doc(ctx, done, crc, bytes);
  FILE *f = NULL;
  int fd = -1, rc = -1;
  if (!doc) {
    gslrt_seterr(err, GSLRT_ERRLEN, "%s: out of memory for the manifest", tmp);
    return -1;
  }
  if (!gslrt_ckdir_join(path, tmp, CKDIR_MANIFEST) || !gslrt_ckdir_join(part, tmp, CKDIR_MANIFEST ".tmp")) {
    gslrt_seterr(err, GSLRT_ERRLEN, "%s: the path is too long", tmp);
    goto fn_exit;
  }
  if ((fd = openat(ctx->ckpt_dir, part, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666)) < 0 ||
      !(f = fdopen(fd, "w"))) {
    gslrt_seterr(err, GSLRT_ERRLEN, "cannot create %s/%s: %s", ctx->opts.checkpoint, part, strerror(errno));
    if (fd >= 0)
      close(fd);
    goto fn_exit;
  }
  if (dump_doc(f, doc) != 0 || fflush(f) != 0 || ferror(f) || fsync(fileno(f)) != 0) {
    gslrt_seterr(err, GSLRT_ERRLEN, "cannot write %s/%s: %s", ctx->opts.checkpoint, part, strerror(errno));
    fclose(f);
    goto fn_exit;
  }
  if (fclose(f) != 0 || renameat(ctx->ckpt_dir, part, ctx->ckpt_dir, path) != 0) {
    gslrt_seterr(err, GSLRT_ERRLEN, "cannot write %s/%s: %s", ctx->opts.checkpoint, path, strerror(errno));
    goto fn_exit;
  }
  rc = 0;
fn_exit:
  json_decref(doc);
  return rc;
}

/* ---- reading the manifest --------------------------------------------------- */

/* s (n bytes) in quotes for a message, at most 40 bytes of it, with '"',
 * '\\' and every byte outside printable ASCII escaped: a message stays
 * one line whatever the manifest holds. */
static const char *quote(char *buf, size_t len, const char *s, size_t n) {
  size_t k = 0;
  buf[k++] = '"';
  for (size_t i = 0; i < n && i < 40 && k + 8 < len; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '"' || c == '\\')
      buf[k++] = '\\', buf[k++] = (char)c;
    else if (c >= 0x20 && c < 0x7f)
      buf[k++] = (char)c;
    else
      k += (size_t)snprintf(buf + k, len - k, "\\x%02x", c);
  }
  snprintf(buf + k, len - k, "%s\"", n > 40 ? "..." : "");
  return buf;
}

/* A JSON value as an error message shows it: 2.9, "f64", an object. */
static void describe(const json_t *v, char *buf, size_t len) {
  switch (json_typeof(v)) {
  case JSON_INTEGER:
    snprintf(buf, len, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    break;
  case JSON_REAL: /* 3.0 stays 3.0, so that "not 3" never says a whole number is not one */
    snprintf(buf, len, fabs(json_real_value(v)) < 1e15 && json_real_value(v) == floor(json_real_value(v)) ? "%.1f" : "%.15g",
             json_real_value(v));
    break;
  case JSON_STRING:
    quote(buf, len, json_string_value(v), json_string_length(v));
    break;
  case JSON_OBJECT:
    snprintf(buf, len, "an object");
    break;
  case JSON_ARRAY:
    snprintf(buf, len, "an array");
    break;
  case JSON_TRUE:
    snprintf(buf, len, "true");
    break;
  case JSON_FALSE:
    snprintf(buf, len, "false");
    break;
  default:
    snprintf(buf, len, "null");
  }
}

/* The fields a manifest's object may have, NULL-terminated. */
static const char *const top_fields[] = {"format", "version", "run", "step", "seed", "program",
                                         "compiler", "optimizer", "precision", "build", "provenance", "signals", "mesh",
                                         "inputs", "tensors", NULL};
static const char *const axis_fields[] = {"axis", "size", NULL};
static const char *const input_fields[] = {"name", "batches", "position", NULL};
static const char *const tensor_fields[] = {"name", "kind", "dtype", "shape", "file", "bytes", "crc32", NULL};

/* Checks that obj (at path, e.g. "tensors[2]") is an object with only the
 * given fields. */
static int only_fields(const json_t *obj, const char *path, const char *const *fields, char *err) {
  const char *key;
  json_t *v;
  char got[64];
  if (!json_is_object(obj)) {
    describe(obj, got, sizeof got);
    gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: %s must be an object, not %s", path, got);
    return -1;
  }
  json_object_foreach((json_t *)obj, key, v) {
    int known = 0;
    for (const char *const *f = fields; *f && !known; f++)
      known = !strcmp(*f, key);
    if (!known) {
      char q[256];
      gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: %s has a field %s, which a checkpoint manifest does not have",
                   *path ? path : "the document", quote(q, sizeof q, key, strlen(key)));
      return -1;
    }
  }
  return 0;
}

/* The field key of obj (whose path is path, "" at the top), which must
 * be there. */
static json_t *field(const json_t *obj, const char *path, const char *key, char *err) {
  json_t *v = json_object_get(obj, key);
  if (!v)
    gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: %s has no \"%s\"", *path ? path : "the document", key);
  return v;
}

/* The name a field goes by in messages: "step", tensors[2].dtype. */
static const char *field_name(char *buf, size_t len, const char *path, const char *key) {
  if (*path)
    snprintf(buf, len, "%s.%s", path, key);
  else
    snprintf(buf, len, "\"%s\"", key);
  return buf;
}

/* A whole number in [lo, hi]. */
static int get_int(const json_t *obj, const char *path, const char *key, int64_t lo, int64_t hi, int64_t *out,
                   char *err) {
  json_t *v = field(obj, path, key, err);
  char got[64], name[128];
  if (!v)
    return -1;
  field_name(name, sizeof name, path, key);
  if (!json_is_integer(v)) {
    describe(v, got, sizeof got);
    gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: %s must be a whole number, not %s", name, got);
    return -1;
  }
  *out = json_integer_value(v);
  if (*out < lo || *out > hi) {
    gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: %s is %lld, not in [%lld, %lld]", name, (long long)*out,
                 (long long)lo, (long long)hi);
    return -1;
  }
  return 0;
}

/* A string of at most max bytes (and, if set is not NULL, one of set),
 * into out (max + 1 bytes). */
static int get_str(const json_t *obj, const char *path, const char *key, size_t max, const char *const *set,
                   char *out, char *err) {
  json_t *v = field(obj, path, key, err);
  char got[64], name[128], any[128] = "";
  if (!v)
    return -1;
  field_name(name, sizeof name, path, key);
  describe(v, got, sizeof got);
  if (!json_is_string(v)) {
    gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: %s must be a string, not %s", name, got);
    return -1;
  }
  if (json_string_length(v) > max) {
    gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: %s is %s, longer than %zu bytes", name, got, max);
    return -1;
  }
  for (size_t i = 0; i < json_string_length(v); i++) {
    unsigned char c = (unsigned char)json_string_value(v)[i];
    if (c < 0x20 || c > 0x7e) { /* names, files, descriptions: what gsl writes is printable ASCII */
      gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: %s is %s, with a byte that is not printable ASCII", name, got);
      return -1;
    }
  }
  if (set) {
    int in = 0;
    for (const char *const *s = set; *s; s++) {
      in |= !strcmp(*s, json_string_value(v));
      snprintf(any + strlen(any), sizeof any - strlen(any), "%s\"%s\"", s == set ? "" : s[1] ? ", " : " or ", *s);
    }
    if (!in) {
      gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: %s is %s, not %s", name, got, any);
      return -1;
    }
  }
  memcpy(out, json_string_value(v), json_string_length(v) + 1);
  return 0;
}

/* An array of at most max elements. */
static json_t *get_array(const json_t *obj, const char *path, const char *key, size_t max, char *err) {
  json_t *v = field(obj, path, key, err);
  char got[64], name[128];
  if (!v)
    return NULL;
  field_name(name, sizeof name, path, key);
  if (!json_is_array(v)) {
    describe(v, got, sizeof got);
    gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: %s must be an array, not %s", name, got);
    return NULL;
  }
  if (json_array_size(v) > max) {
    gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: %s has %zu elements, at most %zu", name, json_array_size(v),
                 max);
    return NULL;
  }
  return v;
}

/* Whether s is a plain file name: no '/', not "." or "..". */
static int plain_name(const char *s) { return *s && !strchr(s, '/') && strcmp(s, ".") && strcmp(s, ".."); }

static const char *const kinds[] = {"param", "state", NULL};
static const char *const dtypes[] = {"f32", "i32", "bf16", NULL};
static const char *const precisions[] = {"f32", "bf16", NULL};

/* One entry of "tensors", at index i, into e. */
static int parse_tensor(const json_t *t, size_t i, ckpt_entry *e, char *err) {
  char path[64], kind[8], dtype[8], name[128];
  int64_t v;
  json_t *shape;
  size_t d;
  json_t *x;
  snprintf(path, sizeof path, "tensors[%zu]", i);
  memset(e, 0, sizeof *e);
  if (only_fields(t, path, tensor_fields, err) != 0 ||
      get_str(t, path, "name", CKDIR_NAME - 1, NULL, e->name, err) != 0 ||
      get_str(t, path, "kind", sizeof kind - 1, kinds, kind, err) != 0 ||
      get_str(t, path, "dtype", sizeof dtype - 1, dtypes, dtype, err) != 0 ||
      !(shape = get_array(t, path, "shape", GSLRT_MAX_RANK, err)) ||
      get_str(t, path, "file", CKDIR_NAME - 1, NULL, e->file, err) != 0 ||
      get_int(t, path, "bytes", 0, INT64_MAX, &e->bytes, err) != 0 || get_int(t, path, "crc32", 0, UINT32_MAX, &v, err) != 0)
    return -1;
  e->crc = (uint32_t)v;
  e->kind = !strcmp(kind, "state") ? GSLRT_STATE : GSLRT_PARAM;
  e->dtype = !strcmp(dtype, "i32") ? GSLRT_I32 : !strcmp(dtype, "bf16") ? GSLRT_BF16 : GSLRT_F32;
  if (!*e->name) {
    gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: %s.name is empty", path);
    return -1;
  }
  if (!plain_name(e->file)) {
    gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: %s.file is \"%s\", not a file name in the checkpoint's "
                 "directory", path, e->file);
    return -1;
  }
  json_array_foreach(shape, d, x) {
    snprintf(name, sizeof name, "%s.shape[%zu]", path, d);
    if (!json_is_integer(x) || json_integer_value(x) < 1) {
      char got[64];
      describe(x, got, sizeof got);
      gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: %s must be a whole number >= 1, not %s", name, got);
      return -1;
    }
    e->shape[e->rank++] = json_integer_value(x);
  }
  return 0;
}

/* "signals": an object whose every field is a number or null, or an array
 * of them. */
static int check_signals(const json_t *doc, char *err) {
  json_t *sig = field(doc, "", "signals", err), *x;
  const char *key;
  char got[64], q[256];
  if (!sig)
    return -1;
  if (!json_is_object(sig)) {
    describe(sig, got, sizeof got);
    gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: \"signals\" must be an object, not %s", got);
    return -1;
  }
  json_object_foreach(sig, key, x) {
    json_t *bad = json_is_number(x) || json_is_null(x) ? NULL : x, *y;
    size_t j;
    if (json_is_array(x)) {
      bad = NULL;
      json_array_foreach(x, j, y)
        if (!bad && !json_is_number(y) && !json_is_null(y))
          bad = y;
    }
    if (bad) {
      describe(bad, got, sizeof got);
      gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: signals.%s must be a number or null, or an array of them, not %s",
                   quote(q, sizeof q, key, strlen(key)), got);
      return -1;
    }
  }
  return 0;
}

int gslrt_ckpt_parse_manifest(const char *text, size_t len, int64_t dir_step, ckpt_manifest *m, char *err) {
  static const char *const formats[] = {"gsl-checkpoint", NULL};
  json_error_t je;
  json_t *doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je), *mesh, *inputs, *tensors, *x;
  char format[16], seed[32];
  int64_t v, batches = 0;
  size_t i;
  int rc = -1;
  memset(m, 0, sizeof *m);
  if (!doc) { /* jansson's text may quote the input: kept to one printable line */
    for (char *c = je.text; *c; c++)
      if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e)
        *c = '?';
    gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json:%d:%d: %s", je.line, je.column, je.text);
    return -1;
  }
  if (only_fields(doc, "", top_fields, err) != 0 ||
      get_str(doc, "", "format", sizeof format - 1, formats, format, err) != 0 ||
      get_int(doc, "", "version", 0, INT_MAX, &v, err) != 0)
    goto fn_exit;
  if (v < CKPT_VERSION_OLD || v > CKPT_VERSION) {
    gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json has format version %lld, this runtime reads %d to %d",
                 (long long)v, CKPT_VERSION_OLD, CKPT_VERSION);
    goto fn_exit;
  }
  if (v < CKPT_VERSION_SIGNALS && json_object_get(doc, "signals")) {
    gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: format version %lld has no \"signals\" (they came in %d)",
                 (long long)v, CKPT_VERSION_SIGNALS);
    goto fn_exit;
  }
  if (v >= CKPT_VERSION_SIGNALS && check_signals(doc, err) != 0)
    goto fn_exit;
  if (v == CKPT_VERSION_OLD && json_object_get(doc, "precision")) {
    gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: format version %d has no \"precision\" (it came in %d)",
                 CKPT_VERSION_OLD, CKPT_VERSION_PRECISION);
    goto fn_exit;
  }
  if (v == CKPT_VERSION_OLD)
    snprintf(m->precision, sizeof m->precision, "f32");
  else if (get_str(doc, "", "precision", sizeof m->precision - 1, precisions, m->precision, err) != 0)
    goto fn_exit;
  if (v < CKPT_VERSION_BUILD && json_object_get(doc, "build")) {
    gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: format version %lld has no \"build\" (it came in %d)",
                 (long long)v, CKPT_VERSION_BUILD);
    goto fn_exit;
  }
  if (v < CKPT_VERSION && json_object_get(doc, "provenance")) {
    gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: format version %lld has no \"provenance\" (it came in %d)",
                 (long long)v, CKPT_VERSION);
    goto fn_exit;
  }
  if (v == CKPT_VERSION) { /* a record for audit: an object, whatever it holds; resuming reads none of it */
    json_t *p = field(doc, "", "provenance", err);
    char got[64];
    if (!p)
      goto fn_exit;
    if (!json_is_object(p)) {
      describe(p, got, sizeof got);
      gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: \"provenance\" must be an object, not %s", got);
      goto fn_exit;
    }
  }
  if (v >= CKPT_VERSION_BUILD) { /* a record: an object, whatever it holds (build_note reads what it knows) */
    json_t *b = field(doc, "", "build", err);
    char got[64];
    if (!b)
      goto fn_exit;
    if (!json_is_object(b)) {
      describe(b, got, sizeof got);
      gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: \"build\" must be an object, not %s", got);
      goto fn_exit;
    }
    m->build = json_incref(b);
  }
  if (get_str(doc, "", "run", 32, NULL, m->run, err) != 0)
    goto fn_exit;
  if (strlen(m->run) != 32 || strspn(m->run, "0123456789abcdef") != 32) {
    gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: \"run\" is \"%s\", not 32 hexadecimal digits", m->run);
    goto fn_exit;
  }
  if (get_int(doc, "", "step", 0, INT64_MAX, &m->step, err) != 0)
    goto fn_exit;
  if (m->step != dir_step) {
    char name[CKDIR_NAME];
    gslrt_ckdir_step_name(name, sizeof name, dir_step);
    gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: \"step\" is %lld, but the directory is %s",
                 (long long)m->step, name);
    goto fn_exit;
  }
  if (get_str(doc, "", "seed", 20, NULL, seed, err) != 0)
    goto fn_exit;
  errno = 0;
  m->seed = strtoull(seed, NULL, 10);
  if (!*seed || strspn(seed, "0123456789") != strlen(seed) || errno || (seed[0] == '0' && seed[1])) {
    gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: \"seed\" is \"%s\", not a decimal integer from 0 to %llu",
                 seed, (unsigned long long)UINT64_MAX);
    goto fn_exit;
  }
  if (!json_is_string(json_object_get(doc, "program")) || !json_is_string(json_object_get(doc, "compiler"))) {
    char got[64];
    const char *which = json_is_string(json_object_get(doc, "program")) ? "compiler" : "program";
    if (!field(doc, "", which, err))
      goto fn_exit;
    describe(json_object_get(doc, which), got, sizeof got);
    gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: \"%s\" must be a string, not %s", which, got);
    goto fn_exit;
  }
  if (get_str(doc, "", "optimizer", sizeof m->optimizer - 1, NULL, m->optimizer, err) != 0 ||
      !(mesh = get_array(doc, "", "mesh", GSLRT_MAX_AXES, err)) ||
      !(inputs = get_array(doc, "", "inputs", INT_MAX, err)) || !(tensors = get_array(doc, "", "tensors", INT_MAX, err)))
    goto fn_exit;
  json_array_foreach(mesh, i, x) {
    char path[64], axis[CKDIR_NAME];
    snprintf(path, sizeof path, "mesh[%zu]", i);
    if (only_fields(x, path, axis_fields, err) != 0 || get_str(x, path, "axis", CKDIR_NAME - 1, NULL, axis, err) != 0 ||
        get_int(x, path, "size", 1, INT_MAX, &v, err) != 0)
      goto fn_exit;
  }
  json_array_foreach(inputs, i, x) {
    char path[64], name[CKDIR_NAME];
    snprintf(path, sizeof path, "inputs[%zu]", i);
    if (only_fields(x, path, input_fields, err) != 0 || get_str(x, path, "name", CKDIR_NAME - 1, NULL, name, err) != 0 ||
        get_int(x, path, "batches", 1, INT64_MAX, &batches, err) != 0 ||
        get_int(x, path, "position", 0, batches - 1, &v, err) != 0)
      goto fn_exit;
    for (size_t j = 0; j < i; j++)
      if (!strcmp(json_string_value(json_object_get(json_array_get(inputs, j), "name")), name)) {
        gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: inputs[%zu] and inputs[%zu] are both \"%s\"", j, i, name);
        goto fn_exit;
      }
  }
  if (!(m->list = calloc(json_array_size(tensors) + 1, sizeof *m->list))) {
    gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: out of memory");
    goto fn_exit;
  }
  json_array_foreach(tensors, i, x) {
    ckpt_entry *e = &m->list[i];
    if (parse_tensor(x, i, e, err) != 0)
      goto fn_exit;
    for (size_t j = 0; j < i; j++)
      if (!strcmp(m->list[j].name, e->name) || !strcmp(m->list[j].file, e->file)) {
        int same = !strcmp(m->list[j].name, e->name);
        gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: tensors[%zu] and tensors[%zu] both have the %s \"%s\"", j,
                     i, same ? "name" : "file", same ? e->name : e->file);
        goto fn_exit;
      }
    m->n++;
  }
  rc = 0;
fn_exit:
  json_decref(doc);
  if (rc != 0) {
    free(m->list);
    json_decref(m->build);
    m->list = NULL, m->n = 0, m->build = NULL;
  }
  return rc;
}

/* ---- resuming: the program against the manifest, and the notes ------------- */

int gslrt_ckpt_match(gslrt_ctx *ctx, ckpt_entry *list, int n, char *err) {
  char there[256], here[256];
  for (int i = 0; i < ctx->ntensors; i++) {
    const gslrt_tensor *t = &ctx->tensors[i];
    ckpt_entry *e = NULL;
    if (!is_saved(t))
      continue;
    for (int k = 0; k < n && !e; k++)
      if (!strcmp(list[k].name, t->name))
        e = &list[k];
    if (!e) {
      gslrt_seterr(err, GSLRT_ERRLEN, "%s %s of this program is not there", kind_name(t->kind), t->name);
      return -1;
    }
    e->used = 1;
    /* f32 and bf16 restore into each other (rounded or widened, with a note) */
    int32_t same = e->dtype != GSLRT_I32 && t->dtype != GSLRT_I32 ? t->dtype : e->dtype;
    gslrt_type_str(there, sizeof there, same, e->rank, e->shape);
    gslrt_type_str(here, sizeof here, t->dtype, t->rank, t->global_shape);
    if (strcmp(there, here)) /* the shapes differ: name both dtypes as they are */
      gslrt_type_str(there, sizeof there, e->dtype, e->rank, e->shape);
    if (e->kind != t->kind) {
      gslrt_seterr(err, GSLRT_ERRLEN, "%s is a %s there, a %s in this program", t->name, kind_name(e->kind),
                   kind_name(t->kind));
      return -1;
    }
    if (strcmp(there, here)) {
      gslrt_seterr(err, GSLRT_ERRLEN, "%s %s is %s there, %s in this program", kind_name(t->kind), t->name,
                   there, here);
      return -1;
    }
  }
  for (int k = 0; k < n; k++)
    if (!list[k].used) {
      gslrt_seterr(err, GSLRT_ERRLEN, "%s %s is there, not in this program", kind_name(list[k].kind),
                   list[k].name);
      return -1;
    }
  return 0;
}

void gslrt_ckpt_precision_notes(const gslrt_ctx *ctx, const char *where, const ckpt_manifest *m) {
  gslrt_erase_progress();
  if (strcmp(m->precision, precision_name(ctx)))
    fprintf(stderr, "%s: note: checkpoint %s was saved by a program compiled with --precision %s, this one "
            "has --precision %s: resuming\n", ctx->prog, where, m->precision, precision_name(ctx));
  for (int i = 0; i < ctx->ntensors; i++) {
    const gslrt_tensor *t = &ctx->tensors[i];
    const ckpt_entry *e = NULL;
    for (int k = 0; is_saved(t) && k < m->n && !e; k++)
      if (!strcmp(m->list[k].name, t->name))
        e = &m->list[k];
    if (e && e->dtype != t->dtype)
      fprintf(stderr, "%s: note: checkpoint tensor '%s' is %s, the program's is %s: %s\n", ctx->prog, t->name,
              gslrt_dtype_name(e->dtype), gslrt_dtype_name(t->dtype),
              t->dtype == GSLRT_BF16 ? "rounded to nearest even" : "widened exactly");
  }
  fflush(stderr);
}

/* A const's value in a note: 8, 0.001, "x"; "(none)" for none. */
static void show_value(const json_t *v, char *buf, size_t len) {
  char *text;
  if (!v) {
    snprintf(buf, len, "(none)");
  } else if (json_is_real(v)) { /* the shortest of %.15g and %.17g that reads back */
    snprintf(buf, len, "%.15g", json_real_value(v));
    if (strtod(buf, NULL) != json_real_value(v))
      snprintf(buf, len, "%.17g", json_real_value(v));
  } else if ((text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT))) {
    snprintf(buf, len, "%s", text);
    free(text);
  } else {
    snprintf(buf, len, "?");
  }
}

/* Appends ", " (unless at the start) and the formatted text to buf. */
static void append(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t len, const char *fmt, ...) {
  size_t n = strlen(buf);
  va_list ap;
  if (n + 3 >= len)
    return;
  if (n)
    buf[n++] = ',', buf[n++] = ' ', buf[n] = 0;
  va_start(ap, fmt);
  vsnprintf(buf + n, len - n, fmt, ap);
  va_end(ap);
}

/* The files of "sources" in a and b (arrays of {"file", "sha256"}) whose
 * sha256 differs or which only one has, into buf ("" if none). */
static void changed_sources(const json_t *a, const json_t *b, char *buf, size_t len) {
  const json_t *lists[2] = {a, b};
  size_t i, j;
  json_t *x, *y;
  *buf = 0;
  for (int side = 0; side < 2; side++)
    json_array_foreach((json_t *)lists[side], i, x) {
      const char *file = json_string_value(json_object_get(x, "file"));
      const char *sha = json_string_value(json_object_get(x, "sha256")), *other = NULL;
      int seen = 0;
      if (!file)
        continue;
      json_array_foreach((json_t *)lists[!side], j, y)
        if (json_string_value(json_object_get(y, "file")) && !strcmp(json_string_value(json_object_get(y, "file")), file))
          seen = 1, other = json_string_value(json_object_get(y, "sha256"));
      if (!seen || (side == 0 && (!sha || !other || strcmp(sha, other))))
        append(buf, len, "%s", file);
    }
}

/* Whether build record b's "mesh_consts" names key: a const that sizes
 * a mesh axis, which a resume on another mesh changes as a matter of
 * course. */
static int sizes_mesh(const json_t *b, const char *key) {
  size_t i;
  json_t *x;
  json_array_foreach(json_object_get(b, "mesh_consts"), i, x)
    if (json_is_string(x) && !strcmp(json_string_value(x), key))
      return 1;
  return 0;
}

/* Rank 0, after a resume from where: one note on stderr if the program
 * that wrote the checkpoint (its manifest's "build") was compiled with
 * other consts (but those that size the mesh: "mesh_consts"), or from
 * other sources (source_sha256), than this one; nothing where either has
 * no build record, or no such field. */
void gslrt_ckpt_build_note(const gslrt_ctx *ctx, const char *where, const ckpt_manifest *m) {
  const json_t *here = ctx->build, *there = m->build;
  char was[GSLRT_ERRLEN / 4] = "", is[GSLRT_ERRLEN / 4] = "", files[GSLRT_ERRLEN / 4] = "", v[128], part[GSLRT_ERRLEN];
  const char *key;
  json_t *x;
  int consts = 0, sources = 0;
  if (!here || !there)
    return;
  json_t *ca = json_object_get(there, "consts"), *cb = json_object_get(here, "consts");
  if (json_is_object(ca) && json_is_object(cb)) {
    json_object_foreach(ca, key, x) /* the checkpoint's consts, then those only this program has */
      if (!json_equal(x, json_object_get(cb, key)) && !sizes_mesh(here, key) && !sizes_mesh(there, key)) {
        show_value(x, v, sizeof v), append(was, sizeof was, "%s=%s", key, v);
        show_value(json_object_get(cb, key), v, sizeof v), append(is, sizeof is, "%s=%s", key, v);
        consts = 1;
      }
    json_object_foreach(cb, key, x)
      if (!json_object_get(ca, key) && !sizes_mesh(here, key)) {
        append(was, sizeof was, "%s=(none)", key);
        show_value(x, v, sizeof v), append(is, sizeof is, "%s=%s", key, v);
        consts = 1;
      }
  }
  const char *sa = json_string_value(json_object_get(there, "source_sha256"));
  const char *sb = json_string_value(json_object_get(here, "source_sha256"));
  sources = sa && sb && strcmp(sa, sb);
  if (!consts && !sources)
    return;
  if (sources && json_is_array(json_object_get(there, "sources")) && json_is_array(json_object_get(here, "sources")))
    changed_sources(json_object_get(here, "sources"), json_object_get(there, "sources"), files, sizeof files);
  if (consts)
    snprintf(part, sizeof part, "compiled with %s; this one has %s%s", was, is, sources ? "; and " : "");
  else
    *part = 0;
  if (sources)
    snprintf(part + strlen(part), sizeof part - strlen(part), "from other sources (%s%ssource_sha256 %.12s..., "
             "this one's %.12s...)", files, !*files ? "" : strchr(files, ',') ? " differ; " : " differs; ", sa, sb);
  gslrt_erase_progress();
  fprintf(stderr, "%s: note: checkpoint %s was written by a program %s: resuming\n", ctx->prog, where, part);
  fflush(stderr);
}

