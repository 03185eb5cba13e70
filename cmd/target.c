/* cmd/target.c: the targets of convert --target and check --target, and
 * what convert does with them: pick the profile for -O, refuse options
 * that contradict the target, round the virtual size.  The lint is in
 * target-lint.c; diskimg-targets(7) is this table in words, with the
 * source of each rule (keep the two in step).
 *
 * To add a target: a rules array per profile, a profiles array, a row in
 * targets[], a row in diskimg-targets(7), tests in tests/cli/targets.bats. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "common/error.h"
#include "common/util.h"
#include "target.h"
#include "target-gce.h"

#define MiB (UINT64_C(1) << 20)
#define GiB (UINT64_C(1) << 30)
#define TiB (UINT64_C(1) << 40)

/* ---- azure: a fixed VHD, size a whole MiB ---- */

static const struct target_pin azure_pins[] = {
    {"subformat", "fixed", TARGET_STR, "Azure takes fixed VHDs only"},
    {"force_size", "on", TARGET_BOOL,
     "the size must stay a whole MiB (qemu's CHS geometry rounds it to something else)"},
    {NULL},
};

static const struct target_rule azure_rules[] = {
    {TARGET_MUST, TARGET_FIELD_STR, "subformat", "fixed", .what = "Azure takes fixed VHDs only",
     .source = "About VHDs in Azure (fixed VHDs only)"},
    {TARGET_MUST, TARGET_SIZE_ALIGN, .n = MiB, .what = "a whole number of MiB",
     .source = "Azure upload rules; AzureStorageExplorer #3033"},
    {TARGET_MUST, TARGET_FILE_ALIGN, .n = MiB, .n2 = 512,
     .what = "a whole number of MiB after the 512-byte footer",
     .source = "Azure page blobs; AzureStorageExplorer #3029/#3033"},
    {TARGET_MUST, TARGET_SIZE_MIN, .n = 20 * MiB, .what = "20 MiB, Azure's smallest upload",
     .source = "AzureStorageExplorer #3029"},
    {TARGET_MUST, TARGET_SIZE_MAX, .n = 32 * TiB, .what = "32 TiB, Azure's largest upload",
     .source = "AzureStorageExplorer #3029"},
    {TARGET_MUST, TARGET_FIELD_STR, "creator-host", "Wi2k",
     .what = "Azure's tools expect a Windows creator host", .source = "FreeBSD mkimg r284773"},
    {TARGET_MUST, TARGET_FIELD_IS_SIZE, "current-size",
     .what = "Azure sizes the disk by current_size, qemu by the CHS geometry unless the creator "
             "is qem2 or win",
     .source = "azure-linux-image-tools #364; qemu vpc_open()"},
    {TARGET_NOTE, TARGET_FIELD_IS_SIZE, "original-size",
     .what = "a new disk has original_size = current_size", .fix = "harmless once uploaded",
     .source = "VHD specification (hard disk footer)"},
    {.what = NULL},
};

static const struct target_profile azure_profiles[] = {
    {.format = "vpc",
     .options = "subformat=fixed,force_size=on",
     .pins = azure_pins,
     .align = MiB,
     .align_what = "a whole number of MiB",
     .min_size = 20 * MiB,
     .max_size = 2040 * GiB,
     .max_why = "2040 GiB, the largest VHD qemu and diskimg open (Azure's own limit is 32 TiB)",
     .describe = "a fixed VHD",
     .rules = azure_rules},
    {.format = NULL},
};

/* ---- aws: what VM Import takes ---- */

static const struct target_pin stream_pins[] = {
    {"subformat", "streamOptimized", TARGET_STR,
     "only streamOptimized VMDKs are imported (hosted sparse ones are refused)"},
    {"layout", "vmware", TARGET_STR, "the stream is laid out as VMware's own writer lays it out"},
    {NULL},
};

static const struct target_pin aws_vpc_pins[] = {
    {"force_size", "on", TARGET_BOOL,
     "the size must stay exact (CHS geometry rounding makes a larger EBS volume)"},
    {NULL},
};

/* A macro, not a const object: an object is no constant expression for
 * an initializer in C (gcc accepts it, clang refuses it). */
#define AWS_GIB_NOTE                                                                               \
    {                                                                                              \
        TARGET_NOTE, TARGET_SIZE_ALIGN, .n = GiB, .what = "a whole number of GiB",                 \
                                        .fix = "EBS rounds the volume up to the next GiB",         \
                                        .source = "osbuild #326 (observed)",                       \
    }

static const struct target_rule aws_vmdk_rules[] = {
    {TARGET_MUST, TARGET_FIELD_STR, "create-type", "streamOptimized",
     .what = "VM Import takes stream-optimized VMDKs only",
     .source = "VM Import/Export user guide; osbuild-composer #257"},
    {TARGET_MUST, TARGET_FIELD_BITS, "header-flags", .n = 0x30000,
     .what = "a stream's grains are compressed, with markers",
     .source = "VMware Virtual Disk Format 5.0"},
    AWS_GIB_NOTE,
    {.what = NULL},
};

static const struct target_rule aws_vpc_rules[] = {
    {TARGET_MUST, TARGET_FIELD_NOT_STR, "subformat", "differencing",
     .what = "VM Import takes fixed and dynamic VHDs, not a child of another disk",
     .source = "VM Import/Export user guide; osbuild-composer #813"},
    {TARGET_MUST, TARGET_FIELD_IS_SIZE, "current-size",
     .what = "readers that size the disk by current_size and by geometry disagree",
     .source = "osbuild-composer #540; qemu vpc_open()"},
    AWS_GIB_NOTE,
    {.what = NULL},
};

static const struct target_rule aws_raw_rules[] = {
    AWS_GIB_NOTE,
    {.what = NULL},
};

static const struct target_profile aws_profiles[] = {
    {.format = "vmdk",
     .options = "subformat=streamOptimized,adapter_type=lsilogic,layout=vmware",
     .pins = stream_pins,
     .align = GiB,
     .align_what = "a whole number of GiB, the EBS volume's size",
     .compressed = true,
     .describe = "a streamOptimized VMDK",
     .rules = aws_vmdk_rules},
    {.format = "vpc",
     .options = "subformat=dynamic,force_size=on",
     .pins = aws_vpc_pins,
     .align = GiB,
     .align_what = "a whole number of GiB, the EBS volume's size",
     .max_size = 2040 * GiB,
     .max_why = "2040 GiB, the largest VHD qemu and diskimg open",
     .describe = "a VHD",
     .rules = aws_vpc_rules},
    {.format = "raw",
     .align = GiB,
     .align_what = "a whole number of GiB, the EBS volume's size",
     .describe = "a raw image",
     .rules = aws_raw_rules},
    {.format = NULL},
};

/* ---- vsphere: a streamOptimized VMDK as VMware's writer makes it ---- */

static const struct target_rule vsphere_rules[] = {
    {TARGET_MUST, TARGET_FIELD_STR, "create-type", "streamOptimized",
     .what = "ESXi imports hosted disks as streamOptimized (OVF/OVA)",
     .source = "vSphere storage docs (vmkfstools); qemu GitLab #2086"},
    {TARGET_MUST, TARGET_FIELD_INT, "header-version", .n = 3,
     .what = "ESXi refuses older stream headers (sparse VMDK version too old)",
     .source = "glennmatthews/cot #65"},
    {TARGET_MUST, TARGET_FIELD_BITS, "header-flags", .n = 0x30000,
     .what = "a stream's grains are compressed, with markers",
     .source = "VMware Virtual Disk Format 5.0"},
    {TARGET_MUST, TARGET_FIELD_TRUE, "end-of-stream",
     .what = "a stream ends with an end-of-stream marker, as VMware's writer ends it",
     .source = "VMware Virtual Disk Format 5.0; open-vmdk; flatcar/scripts #540"},
    {TARGET_NOTE, TARGET_FIELD_STR, "adapter-type", "lsilogic",
     .what = "VMware's writer and ESXi's default SCSI controller", .fix = "import still works",
     .source = "open-vmdk (vmdk/sparse.c)"},
    {.what = NULL},
};

static const struct target_profile vsphere_profiles[] = {
    {.format = "vmdk",
     .options = "subformat=streamOptimized,adapter_type=lsilogic,layout=vmware",
     .pins = stream_pins,
     .align = 512,
     .align_what = "a whole number of sectors",
     .max_size = 62 * TiB,
     .max_why = "62 TiB, vSphere's largest virtual disk",
     .compressed = true,
     .describe = "a streamOptimized VMDK",
     .rules = vsphere_rules},
    {.format = NULL},
};

/* ---- hyperv: a dynamic VHDX, 1 MiB blocks, 4 KiB physical sectors ---- */

static const struct target_pin hyperv_pins[] = {
    {"subformat", "dynamic", TARGET_STR, "the target is a dynamic VHDX"},
    {"block_size", "1M", TARGET_SIZE,
     "Hyper-V's best practice for Linux guests is 1 MiB blocks (they allocate and discard in "
     "blocks)"},
    {"logical_sector_size", "512", TARGET_SIZE,
     "4 KiB logical sectors change what the guest sees (and qemu cannot read them)"},
    {"physical_sector_size", "4096", TARGET_SIZE,
     "the target has 4 KiB physical sectors, as New-VHD makes them"},
    {NULL},
};

static const struct target_rule hyperv_rules[] = {
    {TARGET_MUST, TARGET_FIELD_INT, "block-size", .n = MiB,
     .what = "Hyper-V's best practice for Linux guests is 1 MiB blocks",
     .source = "MS Best Practices for running Linux on Hyper-V; Linux commit 11d9874c"},
    {TARGET_MUST, TARGET_FIELD_INT, "physical-sector-size", .n = 4096,
     .what = "the target has 4 KiB physical sectors", .source = "[MS-VHDX] 2.6.2.5; New-VHD"},
    {TARGET_MUST, TARGET_FIELD_INT, "logical-sector-size", .n = 512,
     .what = "4 KiB logical sectors change what the guest sees",
     .source = "[MS-VHDX] 2.6.2.4; truenas/middleware #19692"},
    {TARGET_NOTE, TARGET_FIELD_STR, "subformat", "dynamic",
     .what = "Hyper-V also runs fixed VHDX; the target writes dynamic", .fix = "accepted as is",
     .source = "[MS-VHDX] 2.2"},
    {TARGET_NOTE, TARGET_SIZE_ALIGN, .n = 4096, .what = "a whole number of 4 KiB sectors",
     .fix = "the last physical sector is partial", .source = "[MS-VHDX] 2.6.2.5"},
    {.what = NULL},
};

static const struct target_profile hyperv_profiles[] = {
    {.format = "vhdx",
     .options = "subformat=dynamic,block_size=1M,logical_sector_size=512,physical_sector_size="
                "4096",
     .pins = hyperv_pins,
     .align = 4096,
     .align_what = "a whole number of 4 KiB sectors",
     .describe = "a dynamic VHDX",
     .rules = hyperv_rules},
    {.format = NULL},
};

/* ---- gce: disk.raw, a whole GiB, in a gzip'd old-GNU tar ---- */

static const struct target_profile gce_profiles[] = {
    {.format = "raw",
     .align = GiB,
     .align_what = "a whole number of GiB",
     .size_what = "disk.raw",
     .compressed = true,
     .describe = "a gzip'd old-GNU tar of disk.raw",
     .write = target_gce_write},
    {.format = NULL},
};

const struct target targets[] = {
    {"azure", "fixed VHD (vpc), size a whole MiB, force_size", azure_profiles, NULL},
    {"aws", "streamOptimized VMDK (or -O vpc, -O raw), size a whole GiB", aws_profiles, NULL},
    {"vsphere", "streamOptimized VMDK as VMware's writer makes it", vsphere_profiles, NULL},
    {"hyperv", "dynamic VHDX, 1 MiB blocks, 4 KiB physical sectors", hyperv_profiles, NULL},
    {"gce", "disk.raw, a whole GiB, in an old-GNU sparse tar, gzip'd on every core", gce_profiles,
     target_gce_lint},
    {NULL, NULL, NULL, NULL},
};

const char *target_names(void)
{
    static char names[256];

    if (!names[0]) {
        size_t n = 0;
        for (const struct target *t = targets; t->name && n < sizeof names; t++) {
            n += (size_t)snprintf(names + n, sizeof names - n, "%s%s", t == targets ? "" : ", ",
                                  t->name);
        }
    }
    return names;
}

const struct target *target_find(const char *name)
{
    for (const struct target *t = targets; t->name; t++) {
        if (strcmp(t->name, name) == 0) {
            return t;
        }
    }
    return NULL;
}

/* ---- convert: choosing and checking ---- */

/* The formats a target takes, for messages: "vmdk, vpc or raw". */
static void formats_of(const struct target *t, char *buf, size_t len)
{
    size_t n = 0;

    buf[0] = '\0';
    for (const struct target_profile *p = t->profiles; p->format && n < len; p++) {
        const char *sep = p == t->profiles ? "" : p[1].format ? ", " : " or ";
        n += (size_t)snprintf(buf + n, len - n, "%s%s", sep, p->format);
    }
}

static bool same_value(enum target_value kind, const char *a, const char *b)
{
    bool x, y;
    uint64_t u, v;

    switch (kind) {
    case TARGET_BOOL:
        return parse_bool(a, &x) == 0 && parse_bool(b, &y) == 0 && x == y;
    case TARGET_SIZE:
        return parse_size(a, &u) == 0 && parse_size(b, &v) == 0 && u == v;
    default:
        return strcmp(a, b) == 0;
    }
}

struct pin_walk {
    const struct target *t;
    const struct target_profile *p;
    int status;
};

static int check_pin(const char *key, const char *value, void *opaque)
{
    struct pin_walk *w = opaque;

    for (const struct target_pin *pin = w->p->pins; pin && pin->key; pin++) {
        if (strcmp(pin->key, key) == 0 &&
            !same_value(pin->kind, value ? value : "on", pin->value)) {
            w->status = cmd_usage_error("convert",
                                        "--target=%s: -o %s=%s contradicts the target: %s=%s "
                                        "(%s)",
                                        w->t->name, key, value ? value : "on", pin->key, pin->value,
                                        pin->why);
            return 1;
        }
    }
    return 0;
}

static int choose_profile(const struct target *t, const struct target_request *req,
                          const struct target_profile **out)
{
    char fmts[128];

    for (const struct target_profile *p = t->profiles; p->format; p++) {
        if (!req->format || strcmp(req->format, p->format) == 0) {
            *out = p;
            return 0;
        }
    }
    formats_of(t, fmts, sizeof fmts);
    return cmd_usage_error("convert", "--target=%s: -O %s is not accepted: %s takes %s", t->name,
                           req->format, t->name, fmts);
}

static int check_request(const struct target *t, const struct target_profile *p,
                         const struct target_request *req)
{
    if (req->existing) {
        return cmd_usage_error("convert",
                               "--target=%s creates DST: it cannot write an existing target "
                               "(-n or an NBD export)",
                               t->name);
    }
    if (req->backing) {
        return cmd_usage_error(
            "convert", "--target=%s makes a standalone image: -B gives it a backing file", t->name);
    }
    if (req->compress && p->compressed) {
        return cmd_usage_error("convert",
                               "--target=%s: -c is implied: %s is always compressed (drop -c)",
                               t->name, p->describe);
    }
    if (req->compress) {
        return cmd_usage_error("convert",
                               "--target=%s: -c is not possible: %s cannot be compressed", t->name,
                               p->describe);
    }
    if (req->options && p->write) {
        return cmd_usage_error("convert",
                               "--target=%s: -o does not apply: %s has no creation "
                               "options",
                               t->name, p->describe);
    }
    struct pin_walk w = {t, p, 0};
    if (req->options && kv_foreach(req->options, check_pin, &w) != 0) {
        return w.status ? w.status : cmd_usage_error("convert", "bad -o '%s'", req->options);
    }
    return 0;
}

int target_choose(const char *name, const struct target_request *req, struct target_choice *out)
{
    const struct target *t = target_find(name);
    const struct target_profile *p = NULL;
    int r;

    memset(out, 0, sizeof *out);
    if (!t) {
        return cmd_usage_error("convert", "unknown target '%s' (targets: %s)", name,
                               target_names());
    }
    if ((r = choose_profile(t, req, &p)) != 0 || (r = check_request(t, p, req)) != 0) {
        return r;
    }
    out->target = t;
    out->profile = p;
    if (p->options && !cmd_append_options(&out->options, p->options)) {
        return EXIT_ERROR;
    }
    if (req->options && !cmd_append_options(&out->options, req->options)) {
        return EXIT_ERROR;
    }
    return 0;
}

const char *target_help_format(const char *name, const char *format, bool format_given)
{
    const struct target *t = name ? target_find(name) : NULL;

    return t && !format_given ? t->profiles[0].format : format;
}

void target_choice_free(struct target_choice *c)
{
    free(c->options);
    c->options = NULL;
}

int target_size(const struct target_choice *c, uint64_t src_size, bool quiet, uint64_t *out)
{
    const struct target_profile *p = c->profile;
    const char *name = c->target->name, *why = p->align_what;
    uint64_t size = src_size;

    if (p->align && size % p->align) {
        size += p->align - size % p->align;
    }
    if (p->min_size && size < p->min_size) {
        size = p->min_size;
        why = "the smallest size the target takes";
    }
    if (p->max_size && size > p->max_size) {
        return err_setx(EFBIG,
                        "%s: the source's virtual size %" PRIu64 " is larger than %s takes: at "
                        "most %" PRIu64 " bytes (%s)",
                        name, src_size, name, p->max_size, p->max_why);
    }
    if (size != src_size && !quiet) {
        fprintf(stderr, "%s: %s rounded up from %" PRIu64 " to %" PRIu64 " bytes (%s)\n", name,
                p->size_what ? p->size_what : "virtual size", src_size, size, why);
    }
    *out = size;
    return 0;
}
