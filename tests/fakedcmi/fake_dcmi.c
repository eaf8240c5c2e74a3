/*
 * A fake libdcmi.so for tests: the DCMI entry points npu-plugin uses, with the signatures and struct
 * layouts of Huawei's dcmi_interface_api.h (as vendored in Ascend/mind-cluster
 * component/ascend-common/devmanager/dcmi/ and the CANN driver's src/custom/include/).
 *
 * The host it pretends to be is read from the text file named by $FAKE_DCMI_CONFIG on every call, so
 * tests can rewrite it (change health, inject failures) while a backend holds the library open:
 *
 *   # one line per NPU die; every key but card/dev/logic/phy/chip is optional
 *   card 0 dev 0 logic 0 phy 3 chip 910B3 health 0 hbm_mb 65536 ddr_mb 0 aicore 20 bus 0000:C1:00.0
 *   # chip: the v1 chip_name; npu_name: the v2 call's model; board: dcmi_get_device_board_info's board_id
 *   card 2 dev 1 logic 5 phy 5 chip Ascend910 npu_name Ascend910_9392 board 0xb0
 *   card 0 dev 1 logic 1 phy 1 chip 910B3 health 2 faults 0x80E01801,0x80E18402   # dcmi_get_device_errorcode_v2
 *   # ip: the RoCE port's address (IPv4 or IPv6; no key: 0.0.0.0); net_health: dcmi_get_device_network_health's
 *   # result (no key: NOT_SUPPORT); spod: super pod id,server index,chassis id (dcmi_get_device_info 12/1)
 *   card 0 dev 0 logic 0 phy 0 chip 910B3 ip 192.168.100.101 net_health 0 spod 7,2,0
 *   driver 24.1.rc2                      # dcmi_get_driver_version (no line: NOT_SUPPORT)
 *   topo_group 3 0 1 2 3 4 5 6 7         # DCMI topo type for every pair of these physical ids
 *   topo_default 1                       # type for pairs in no group (no topo line: NOT_SUPPORT)
 *   fail dcmi_init -8005                 # make a call fail everywhere ...
 *   fail dcmi_get_device_health card 0 dev 0 -8001   # ... or for one device only
 *   hang dcmi_create_vdevice /tmp/held  # the call blocks, as a hung driver call does, while /tmp/held exists
 *
 *   # vNPUs (dcmi_get_device_info main command 52, dcmi_create_vdevice, dcmi_set_destroy_vdevice):
 *   vnpu_mode 0                          # dcmi_get_vdevice_mode: 0 container, 1 VM (no line: NOT_SUPPORT)
 *   vnpu_total card 0 dev 0 aic 20 aicpu 7 mem 61440 vpc 9 venc 0 vdec 2 jpegd 24 jpege 4 pngd -1
 *   vnpu_template name vir05_1c_16g aic 5 aicpu 1 mem 15360 vpc 2 venc 0 vdec 0 jpegd 6 jpege 1 pngd 0
 *   vnpu card 0 dev 0 id 100 template vir05_1c_16g    # a vNPU that exists when the library is loaded
 *   # -1 is NA (aicpu 0xFFFF, media -1.0). A die without vnpu_total cannot be split (NOT_SUPPORT). vNPUs
 *   # created or destroyed through the library live in its memory on top of the configured ones; ids come
 *   # from [phy*16+100, phy*16+115]; 0xffff destroys every vNPU of the chip, as the driver does.
 *
 * Build with -DFAKE_DCMI_LEGACY to drop the symbols older drivers lack (dcmi_get_card_list,
 * dcmi_get_driver_version, dcmi_get_device_chip_info_v2, dcmi_get_vdevice_mode): the card list is then only
 * dcmi_get_card_num_list, the version only dcmi_get_dcmi_version (the library's own).
 */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_CHIP_NAME_LEN 32
#define MAX_CARD_NUM 64
#define FAKE_MAX_DEVS 64
#define FAKE_MAX_FAILS 64
#define FAKE_MAX_GROUPS 16
#define FAKE_LINE_LEN 512
#define FAKE_HANG_POLL_NS 20000000L
#define FAKE_DCMI_LIBRARY_VERSION "7.35.23"

#define DCMI_OK 0
#define DCMI_ERROR_CODE_BASE (-8000)
#define DCMI_ERR_CODE_INVALID_PARAMETER (DCMI_ERROR_CODE_BASE - 1)
#define DCMI_ERR_CODE_OPER_NOT_PERMITTED (DCMI_ERROR_CODE_BASE - 2)
#define DCMI_ERR_CODE_INNER_ERR (DCMI_ERROR_CODE_BASE - 5)
#define DCMI_ERR_CODE_INVALID_DEVICE_ID (DCMI_ERROR_CODE_BASE - 7)
#define DCMI_ERR_CODE_DEVICE_NOT_EXIST (DCMI_ERROR_CODE_BASE - 8)
#define DCMI_ERR_CODE_NOT_REDAY (DCMI_ERROR_CODE_BASE - 12)
#define DCMI_ERR_CODE_NOT_SUPPORT (DCMI_ERROR_CODE_BASE - 255)

#define DCMI_TOPO_TYPE_SELF 0

#define DCMI_MAIN_CMD_VDEV_MNG 52
#define DCMI_MAIN_CMD_CHIP_INF 12
#define DCMI_CHIP_INF_SUB_CMD_SPOD_INFO 1
#define DCMI_ROCE_PORT 1
#define DCMI_VDEV_RES_NAME_LEN 16
#define DCMI_VDEV_FOR_RESERVE 32
#define DCMI_VDEV_SIZE 20
#define DCMI_SOC_SPLIT_MAX 32
#define FAKE_MAX_TEMPLATES 16
#define FAKE_MAX_VNPUS 256
#define FAKE_MAX_FAULTS 160 /* more than the 128 a caller's list holds, to test the cut */
#define FAKE_DESTROY_ALL 0xFFFF
#define FAKE_ANY_ID 0xFFFFFFFFu

/* ---- struct layouts, verbatim from dcmi_interface_api.h ---- */

struct dcmi_ip_addr {
    union {
        unsigned char ip6[16];
        unsigned char ip4[4];
    } u_addr;
    int ip_type; /* enum dcmi_ip_addr_type: 0 IPv4, 1 IPv6 */
};

struct dcmi_spod_info {
    unsigned int sdid;
    unsigned int super_pod_size;
    unsigned int super_pod_id;
    unsigned int server_index;
    unsigned int chassis_id;
    unsigned int super_pod_type;
    unsigned int reserve[6];
};

struct dcmi_chip_info {
    unsigned char chip_type[MAX_CHIP_NAME_LEN];
    unsigned char chip_name[MAX_CHIP_NAME_LEN];
    unsigned char chip_ver[MAX_CHIP_NAME_LEN];
    unsigned int aicore_cnt;
};

struct dcmi_chip_info_v2 {
    unsigned char chip_type[MAX_CHIP_NAME_LEN];
    unsigned char chip_name[MAX_CHIP_NAME_LEN];
    unsigned char chip_ver[MAX_CHIP_NAME_LEN];
    unsigned int aicore_cnt;
    unsigned char npu_name[MAX_CHIP_NAME_LEN];
};

struct dcmi_board_info {
    unsigned int board_id;
    unsigned int pcb_id;
    unsigned int bom_id;
    unsigned int slot_id;
};

struct dcmi_pcie_info_all {
    unsigned int venderid;
    unsigned int subvenderid;
    unsigned int deviceid;
    unsigned int subdeviceid;
    int domain;
    unsigned int bdf_busid;
    unsigned int bdf_deviceid;
    unsigned int bdf_funcid;
    unsigned char reserve[32];
};

struct dcmi_hbm_info {
    unsigned long long memory_size;
    unsigned int freq;
    unsigned long long memory_usage;
    int temp;
    unsigned int bandwith_util_rate;
};

struct dcmi_get_memory_info_stru {
    unsigned long long memory_size;
    unsigned long long memory_available;
    unsigned int freq;
    unsigned long hugepagesize;
    unsigned long hugepages_total;
    unsigned long hugepages_free;
    unsigned int utiliza;
    unsigned char reserve[60];
};

struct dcmi_create_vdev_res_stru {
    unsigned int vdev_id;
    unsigned int vfg_id;
    char template_name[32];
    unsigned char reserved[64];
};

struct dcmi_create_vdev_out {
    unsigned int vdev_id;
    unsigned int pcie_bus;
    unsigned int pcie_device;
    unsigned int pcie_func;
    unsigned int vfg_id;
    unsigned char reserved[DCMI_VDEV_FOR_RESERVE];
};

struct dcmi_base_resource {
    unsigned long long token;
    unsigned long long token_max;
    unsigned long long task_timeout;
    unsigned int vfg_id;
    unsigned char vip_mode;
    unsigned char reserved[DCMI_VDEV_FOR_RESERVE - 1];
};

struct dcmi_computing_resource {
    float aic;
    float aiv;
    unsigned short dsa;
    unsigned short rtsq;
    unsigned short acsq;
    unsigned short cdqm;
    unsigned short c_core;
    unsigned short ffts;
    unsigned short sdma;
    unsigned short pcie_dma;
    unsigned long long memory_size;
    unsigned int event_id;
    unsigned int notify_id;
    unsigned int stream_id;
    unsigned int model_id;
    unsigned short topic_schedule_aicpu;
    unsigned short host_ctrl_cpu;
    unsigned short host_aicpu;
    unsigned short device_aicpu;
    unsigned short topic_ctrl_cpu_slot;
    unsigned int vdev_aicore_utilization;
    unsigned long long vdev_memory_total;
    unsigned long long vdev_memory_free;
    unsigned char reserved[DCMI_VDEV_FOR_RESERVE - DCMI_VDEV_SIZE];
};

struct dcmi_media_resource {
    float jpegd;
    float jpege;
    float vpc;
    float vdec;
    float pngd;
    float venc;
    unsigned char reserved[DCMI_VDEV_FOR_RESERVE];
};

struct dcmi_vdev_query_info {
    char name[DCMI_VDEV_RES_NAME_LEN];
    unsigned int status;
    unsigned int is_container_used;
    unsigned int vfid;
    unsigned int vfg_id;
    unsigned long long container_id;
    struct dcmi_base_resource base;
    struct dcmi_computing_resource computing;
    struct dcmi_media_resource media;
};

struct dcmi_vdev_query_stru {
    unsigned int vdev_id;
    struct dcmi_vdev_query_info query_info;
};

struct dcmi_soc_free_resource {
    unsigned int vfg_num;
    unsigned int vfg_bitmap;
    struct dcmi_base_resource base;
    struct dcmi_computing_resource computing;
    struct dcmi_media_resource media;
};

struct dcmi_soc_total_resource {
    unsigned int vdev_num;
    unsigned int vdev_id[DCMI_SOC_SPLIT_MAX];
    unsigned int vfg_num;
    unsigned int vfg_bitmap;
    struct dcmi_base_resource base;
    struct dcmi_computing_resource computing;
    struct dcmi_media_resource media;
};

/* ---- the configured host ---- */

struct fake_dev {
    int card, dev, logic, phy;
    char chip[MAX_CHIP_NAME_LEN];
    char npu_name[MAX_CHIP_NAME_LEN];
    unsigned int health, board;
    int has_board;
    unsigned long long hbm_mb, ddr_mb;
    int has_hbm, has_ddr, has_bus;
    unsigned int aicore;
    unsigned int domain, bus, devno, func;
    unsigned int faults[FAKE_MAX_FAULTS];
    int nfaults;
    int ip_family; /* 0: no address */
    unsigned char ip[16];
    int has_net_health, has_spod;
    unsigned int net_health, spod_id, spod_server, spod_chassis;
};

struct fake_fail {
    char call[64];
    int card, dev; /* -1: every device */
    int code;
};

struct fake_group {
    int type, count;
    int phys[FAKE_MAX_DEVS];
};

/* Resources of a chip or a template; -1 (aicpu: 0xFFFF) is NA. */
struct fake_res {
    float aic, vpc, venc, vdec, jpegd, jpege, pngd;
    int aicpu;
    unsigned long long mem;
};

struct fake_total {
    int card, dev;
    struct fake_res res;
};

struct fake_template {
    char name[32];
    struct fake_res res;
};

struct fake_vnpu {
    int card, dev;
    unsigned int id;
    char template_name[32];
};

struct fake_host {
    int ndevs, nfails, ngroups, has_topo, topo_default, has_driver;
    int has_vnpu_mode, vnpu_mode, ntotals, ntemplates, nvnpus;
    struct fake_dev devs[FAKE_MAX_DEVS];
    struct fake_fail fails[FAKE_MAX_FAILS];
    struct fake_group groups[FAKE_MAX_GROUPS];
    struct fake_total totals[FAKE_MAX_DEVS];
    struct fake_template templates[FAKE_MAX_TEMPLATES];
    struct fake_vnpu vnpus[FAKE_MAX_VNPUS];
    char driver[64];
    char hang_call[64];
    char hang_file[FAKE_LINE_LEN];
};

static struct fake_host g_host;
static int g_initialized;
/* What the library's own calls changed, kept across config re-reads: vNPUs made, configured ones destroyed. */
static struct fake_vnpu g_created[FAKE_MAX_VNPUS];
static struct fake_vnpu g_destroyed[FAKE_MAX_VNPUS];
static int g_ncreated, g_ndestroyed;

static int parse_bus(const char *text, struct fake_dev *d)
{
    if (sscanf(text, "%x:%x:%x.%x", &d->domain, &d->bus, &d->devno, &d->func) != 4) {
        return -1;
    }
    d->has_bus = 1;
    return 0;
}

/* "0x80E01801,0x80E18402" (or "none"); "many:N" makes N codes 0x80E00000.. for the list-length cut. */
static int parse_faults(const char *text, struct fake_dev *d)
{
    char copy[FAKE_LINE_LEN];
    char *item, *save = NULL;

    d->nfaults = 0;
    if (strncmp(text, "many:", 5) == 0) {
        int n = atoi(text + 5);
        for (int i = 0; i < n && i < FAKE_MAX_FAULTS; i++) {
            d->faults[d->nfaults++] = 0x80E00000u + (unsigned int)i;
        }
        return 0;
    }
    if (strcmp(text, "none") == 0) {
        return 0;
    }
    snprintf(copy, sizeof(copy), "%s", text);
    for (item = strtok_r(copy, ",", &save); item != NULL; item = strtok_r(NULL, ",", &save)) {
        if (d->nfaults >= FAKE_MAX_FAULTS) {
            return -1;
        }
        d->faults[d->nfaults++] = (unsigned int)strtoul(item, NULL, 0);
    }
    return 0;
}

static int parse_ip(const char *text, struct fake_dev *d)
{
    if (inet_pton(AF_INET, text, d->ip) == 1) {
        d->ip_family = AF_INET;
        return 0;
    }
    if (inet_pton(AF_INET6, text, d->ip) == 1) {
        d->ip_family = AF_INET6;
        return 0;
    }
    return -1;
}

static int parse_spod(const char *text, struct fake_dev *d)
{
    if (sscanf(text, "%u,%u,%u", &d->spod_id, &d->spod_server, &d->spod_chassis) != 3) {
        return -1;
    }
    d->has_spod = 1;
    return 0;
}

static int parse_dev_pair(struct fake_dev *d, const char *key, const char *val)
{
    if (strcmp(key, "ip") == 0) { return parse_ip(val, d); }
    if (strcmp(key, "spod") == 0) { return parse_spod(val, d); }
    if (strcmp(key, "net_health") == 0) {
        d->net_health = (unsigned int)strtoul(val, NULL, 0);
        d->has_net_health = 1;
        return 0;
    }
    if (strcmp(key, "card") == 0) { d->card = atoi(val); return 0; }
    if (strcmp(key, "dev") == 0) { d->dev = atoi(val); return 0; }
    if (strcmp(key, "logic") == 0) { d->logic = atoi(val); return 0; }
    if (strcmp(key, "phy") == 0) { d->phy = atoi(val); return 0; }
    if (strcmp(key, "health") == 0) { d->health = (unsigned int)strtoul(val, NULL, 0); return 0; }
    if (strcmp(key, "aicore") == 0) { d->aicore = (unsigned int)strtoul(val, NULL, 0); return 0; }
    if (strcmp(key, "hbm_mb") == 0) { d->hbm_mb = strtoull(val, NULL, 0); d->has_hbm = 1; return 0; }
    if (strcmp(key, "ddr_mb") == 0) { d->ddr_mb = strtoull(val, NULL, 0); d->has_ddr = 1; return 0; }
    if (strcmp(key, "bus") == 0) { return parse_bus(val, d); }
    if (strcmp(key, "faults") == 0) { return parse_faults(val, d); }
    if (strcmp(key, "board") == 0) { d->board = (unsigned int)strtoul(val, NULL, 0); d->has_board = 1; return 0; }
    if (strcmp(key, "chip") == 0) {
        snprintf(d->chip, sizeof(d->chip), "%s", val);
        return 0;
    }
    if (strcmp(key, "npu_name") == 0) {
        snprintf(d->npu_name, sizeof(d->npu_name), "%s", val);
        return 0;
    }
    return -1;
}

static int parse_dev(char *rest)
{
    struct fake_dev *d;
    char *key, *val;

    if (g_host.ndevs >= FAKE_MAX_DEVS) {
        return -1;
    }
    d = &g_host.devs[g_host.ndevs++];
    memset(d, 0, sizeof(*d));
    d->card = d->dev = d->logic = d->phy = -1;
    while ((key = strtok(rest, " \t\n")) != NULL) {
        rest = NULL;
        val = strtok(NULL, " \t\n");
        if (val == NULL || parse_dev_pair(d, key, val) != 0) {
            return -1;
        }
    }
    return (d->card < 0 || d->dev < 0 || d->logic < 0 || d->phy < 0 || d->chip[0] == '\0') ? -1 : 0;
}

static int parse_fail(char *rest)
{
    struct fake_fail *f;
    int n;

    if (g_host.nfails >= FAKE_MAX_FAILS) {
        return -1;
    }
    f = &g_host.fails[g_host.nfails++];
    f->card = f->dev = -1;
    n = sscanf(rest, "%63s card %d dev %d %d", f->call, &f->card, &f->dev, &f->code);
    if (n == 4) {
        return 0;
    }
    f->card = f->dev = -1;
    return sscanf(rest, "%63s %d", f->call, &f->code) == 2 ? 0 : -1;
}

static int parse_group(char *rest)
{
    struct fake_group *g;
    char *tok;

    if (g_host.ngroups >= FAKE_MAX_GROUPS || (tok = strtok(rest, " \t\n")) == NULL) {
        return -1;
    }
    g = &g_host.groups[g_host.ngroups++];
    g->type = atoi(tok);
    g->count = 0;
    while ((tok = strtok(NULL, " \t\n")) != NULL && g->count < FAKE_MAX_DEVS) {
        g->phys[g->count++] = atoi(tok);
    }
    g_host.has_topo = 1;
    return 0;
}

static int parse_res_pair(struct fake_res *r, const char *key, const char *val)
{
    float f = strtof(val, NULL);

    if (strcmp(key, "aic") == 0) { r->aic = f; return 0; }
    if (strcmp(key, "aicpu") == 0) { r->aicpu = atoi(val); return 0; }
    if (strcmp(key, "mem") == 0) { r->mem = strtoull(val, NULL, 0); return 0; }
    if (strcmp(key, "vpc") == 0) { r->vpc = f; return 0; }
    if (strcmp(key, "venc") == 0) { r->venc = f; return 0; }
    if (strcmp(key, "vdec") == 0) { r->vdec = f; return 0; }
    if (strcmp(key, "jpegd") == 0) { r->jpegd = f; return 0; }
    if (strcmp(key, "jpege") == 0) { r->jpege = f; return 0; }
    if (strcmp(key, "pngd") == 0) { r->pngd = f; return 0; }
    return -1;
}

/* `key value` pairs after the line's first word: card/dev/id/name/template, or a resource. */
static int parse_vnpu_line(char *rest, int *card, int *dev, unsigned int *id, char *name, struct fake_res *res)
{
    char *key, *val;

    while ((key = strtok(rest, " \t\n")) != NULL) {
        rest = NULL;
        if ((val = strtok(NULL, " \t\n")) == NULL) {
            return -1;
        }
        if (strcmp(key, "card") == 0) {
            *card = atoi(val);
        } else if (strcmp(key, "dev") == 0) {
            *dev = atoi(val);
        } else if (strcmp(key, "id") == 0) {
            *id = (unsigned int)strtoul(val, NULL, 0);
        } else if (strcmp(key, "name") == 0 || strcmp(key, "template") == 0) {
            snprintf(name, 32, "%s", val);
        } else if (res == NULL || parse_res_pair(res, key, val) != 0) {
            return -1;
        }
    }
    return 0;
}

static int parse_total(char *rest)
{
    struct fake_total *t;
    unsigned int unused_id = 0;
    char unused_name[32];

    if (g_host.ntotals >= FAKE_MAX_DEVS) {
        return -1;
    }
    t = &g_host.totals[g_host.ntotals++];
    t->card = t->dev = -1;
    return parse_vnpu_line(rest, &t->card, &t->dev, &unused_id, unused_name, &t->res) == 0 && t->card >= 0 ? 0 : -1;
}

static int parse_template(char *rest)
{
    struct fake_template *t;
    int unused_card = 0, unused_dev = 0;
    unsigned int unused_id = 0;

    if (g_host.ntemplates >= FAKE_MAX_TEMPLATES) {
        return -1;
    }
    t = &g_host.templates[g_host.ntemplates++];
    return parse_vnpu_line(rest, &unused_card, &unused_dev, &unused_id, t->name, &t->res) == 0 && t->name[0] ? 0 : -1;
}

static int parse_vnpu(char *rest)
{
    struct fake_vnpu *v;

    if (g_host.nvnpus >= FAKE_MAX_VNPUS) {
        return -1;
    }
    v = &g_host.vnpus[g_host.nvnpus++];
    v->card = v->dev = -1;
    return parse_vnpu_line(rest, &v->card, &v->dev, &v->id, v->template_name, NULL) == 0 && v->card >= 0 ? 0 : -1;
}

static int parse_line(char *line)
{
    char word[32];
    int used = 0;

    if (sscanf(line, "%31s%n", word, &used) != 1 || word[0] == '#') {
        return 0;
    }
    if (strcmp(word, "card") == 0) {
        return parse_dev(line);
    }
    if (strcmp(word, "fail") == 0) {
        return parse_fail(line + used);
    }
    if (strcmp(word, "topo_group") == 0) {
        return parse_group(line + used);
    }
    if (strcmp(word, "topo_default") == 0) {
        g_host.has_topo = 1;
        return sscanf(line + used, "%d", &g_host.topo_default) == 1 ? 0 : -1;
    }
    if (strcmp(word, "hang") == 0) {
        return sscanf(line + used, "%63s %511s", g_host.hang_call, g_host.hang_file) == 2 ? 0 : -1;
    }
    if (strcmp(word, "driver") == 0) {
        g_host.has_driver = 1;
        return sscanf(line + used, "%63s", g_host.driver) == 1 ? 0 : -1;
    }
    if (strcmp(word, "vnpu_mode") == 0) {
        g_host.has_vnpu_mode = 1;
        return sscanf(line + used, "%d", &g_host.vnpu_mode) == 1 ? 0 : -1;
    }
    if (strcmp(word, "vnpu_total") == 0) {
        return parse_total(line + used);
    }
    if (strcmp(word, "vnpu_template") == 0) {
        return parse_template(line + used);
    }
    if (strcmp(word, "vnpu") == 0) {
        return parse_vnpu(line + used);
    }
    return -1;
}

/* Re-read the host description; nonzero (and a note on stderr) when it is missing or malformed. */
static int load_host(void)
{
    const char *path = getenv("FAKE_DCMI_CONFIG");
    char line[FAKE_LINE_LEN];
    FILE *fp;
    int lineno = 0;

    memset(&g_host, 0, sizeof(g_host));
    if (path == NULL || (fp = fopen(path, "r")) == NULL) {
        fprintf(stderr, "fake_dcmi: cannot open $FAKE_DCMI_CONFIG (%s)\n", path ? path : "unset");
        return -1;
    }
    while (fgets(line, sizeof(line), fp) != NULL) {
        char copy[FAKE_LINE_LEN];
        lineno++;
        snprintf(copy, sizeof(copy), "%s", line);
        if (parse_line(line) != 0) {
            fprintf(stderr, "fake_dcmi: %s:%d: cannot parse: %s", path, lineno, copy);
            fclose(fp);
            return -1;
        }
    }
    fclose(fp);
    return 0;
}

static int injected(const char *call, int card, int dev)
{
    int i;

    for (i = 0; i < g_host.nfails; i++) {
        const struct fake_fail *f = &g_host.fails[i];
        if (strcmp(f->call, call) == 0 && (f->card < 0 || (f->card == card && f->dev == dev))) {
            return f->code;
        }
    }
    return DCMI_OK;
}

static int hangs(const char *call)
{
    return g_host.hang_call[0] != '\0' && strcmp(g_host.hang_call, call) == 0 && access(g_host.hang_file, F_OK) == 0;
}

/* The common prologue of every entry point: fresh config, no hang, init done, no injected failure. */
static int enter(const char *call, int card, int dev)
{
    const struct timespec poll = {0, FAKE_HANG_POLL_NS};
    int loaded;

    while ((loaded = load_host()) == 0 && hangs(call)) {
        nanosleep(&poll, NULL);
    }
    if (loaded != 0) {
        return DCMI_ERR_CODE_INNER_ERR;
    }
    if (!g_initialized && strcmp(call, "dcmi_init") != 0) {
        return DCMI_ERR_CODE_NOT_REDAY;
    }
    return injected(call, card, dev);
}

static const struct fake_dev *find_dev(int card, int dev)
{
    int i;

    for (i = 0; i < g_host.ndevs; i++) {
        if (g_host.devs[i].card == card && g_host.devs[i].dev == dev) {
            return &g_host.devs[i];
        }
    }
    return NULL;
}

static const struct fake_dev *find_logic(int logic)
{
    int i;

    for (i = 0; i < g_host.ndevs; i++) {
        if (g_host.devs[i].logic == logic) {
            return &g_host.devs[i];
        }
    }
    return NULL;
}

/* Look up (card, dev) after the prologue; *out is NULL whenever the return is not DCMI_OK. */
static int enter_dev(const char *call, int card, int dev, const struct fake_dev **out)
{
    int ret = enter(call, card, dev);

    *out = NULL;
    if (ret != DCMI_OK) {
        return ret;
    }
    *out = find_dev(card, dev);
    return *out ? DCMI_OK : DCMI_ERR_CODE_INVALID_DEVICE_ID;
}

static int copy_string(char *buf, size_t len, const char *text)
{
    if (buf == NULL || len == 0) {
        return DCMI_ERR_CODE_INVALID_PARAMETER;
    }
    snprintf(buf, len, "%s", text);
    return DCMI_OK;
}

/* ---- the DCMI entry points ---- */

int dcmi_init(void)
{
    int ret = enter("dcmi_init", -1, -1);

    if (ret == DCMI_OK) {
        g_initialized = 1;
    }
    return ret;
}

static int contains(const int *list, int n, int value)
{
    int i;

    for (i = 0; i < n; i++) {
        if (list[i] == value) {
            return 1;
        }
    }
    return 0;
}

static int card_list(const char *call, int *card_num, int *card_list, int list_len)
{
    int ret = enter(call, -1, -1);
    int i, n = 0;

    if (ret != DCMI_OK) {
        return ret;
    }
    if (card_num == NULL || card_list == NULL || list_len <= 0) {
        return DCMI_ERR_CODE_INVALID_PARAMETER;
    }
    for (i = 0; i < g_host.ndevs && n < list_len; i++) {
        int card = g_host.devs[i].card, pos = n;
        if (contains(card_list, n, card)) {
            continue;
        }
        while (pos > 0 && card_list[pos - 1] > card) { /* ascending, like the driver */
            card_list[pos] = card_list[pos - 1];
            pos--;
        }
        card_list[pos] = card;
        n++;
    }
    *card_num = n;
    return DCMI_OK;
}

int dcmi_get_card_num_list(int *card_num, int *card_list_out, int list_len)
{
    return card_list("dcmi_get_card_num_list", card_num, card_list_out, list_len);
}

#ifndef FAKE_DCMI_LEGACY
int dcmi_get_card_list(int *card_num, int *card_list_out, int list_len)
{
    return card_list("dcmi_get_card_list", card_num, card_list_out, list_len);
}
#endif

int dcmi_get_device_num_in_card(int card_id, int *device_num)
{
    int ret = enter("dcmi_get_device_num_in_card", card_id, -1);
    int i, n = 0;

    if (ret != DCMI_OK) {
        return ret;
    }
    for (i = 0; i < g_host.ndevs; i++) {
        n += g_host.devs[i].card == card_id;
    }
    if (n == 0) {
        return DCMI_ERR_CODE_INVALID_DEVICE_ID;
    }
    *device_num = n;
    return DCMI_OK;
}

int dcmi_get_device_logic_id(int *device_logic_id, int card_id, int device_id)
{
    const struct fake_dev *d;
    int ret = enter_dev("dcmi_get_device_logic_id", card_id, device_id, &d);

    if (ret == DCMI_OK) {
        *device_logic_id = d->logic;
    }
    return ret;
}

int dcmi_get_device_phyid_from_logicid(unsigned int logicid, unsigned int *phyid)
{
    const struct fake_dev *d;
    int ret = enter("dcmi_get_device_phyid_from_logicid", -1, -1);

    if (ret != DCMI_OK) {
        return ret;
    }
    if ((d = find_logic((int)logicid)) == NULL) {
        return DCMI_ERR_CODE_INVALID_DEVICE_ID;
    }
    ret = injected("dcmi_get_device_phyid_from_logicid", d->card, d->dev);
    if (ret == DCMI_OK) {
        *phyid = (unsigned int)d->phy;
    }
    return ret;
}

int dcmi_get_device_health(int card_id, int device_id, unsigned int *health)
{
    const struct fake_dev *d;
    int ret = enter_dev("dcmi_get_device_health", card_id, device_id, &d);

    if (ret == DCMI_OK) {
        *health = d->health;
    }
    return ret;
}

/* As the driver: the device's fault codes, at most list_len of them, and how many were written. */
int dcmi_get_device_errorcode_v2(int card_id, int device_id, int *error_count, unsigned int *error_code_list,
                                 unsigned int list_len)
{
    const struct fake_dev *d;
    int ret = enter_dev("dcmi_get_device_errorcode_v2", card_id, device_id, &d);
    int n;

    if (ret != DCMI_OK) {
        return ret;
    }
    n = d->nfaults < (int)list_len ? d->nfaults : (int)list_len;
    for (int i = 0; i < n; i++) {
        error_code_list[i] = d->faults[i];
    }
    *error_count = n;
    return DCMI_OK;
}

/* The fields dcmi_chip_info and dcmi_chip_info_v2 share. */
static void fill_chip(const struct fake_dev *d, unsigned char *type, unsigned char *name, unsigned char *ver,
                      unsigned int *aicore)
{
    snprintf((char *)type, MAX_CHIP_NAME_LEN, "%s", "Ascend");
    snprintf((char *)name, MAX_CHIP_NAME_LEN, "%s", d->chip);
    snprintf((char *)ver, MAX_CHIP_NAME_LEN, "%s", "V1");
    *aicore = d->aicore;
}

int dcmi_get_device_chip_info(int card_id, int device_id, struct dcmi_chip_info *chip_info)
{
    const struct fake_dev *d;
    int ret = enter_dev("dcmi_get_device_chip_info", card_id, device_id, &d);

    if (ret != DCMI_OK) {
        return ret;
    }
    memset(chip_info, 0, sizeof(*chip_info));
    fill_chip(d, chip_info->chip_type, chip_info->chip_name, chip_info->chip_ver, &chip_info->aicore_cnt);
    return DCMI_OK;
}

#ifndef FAKE_DCMI_LEGACY
/* The v1 fields as dcmi_get_device_chip_info fills them, plus npu_name (empty unless configured). */
int dcmi_get_device_chip_info_v2(int card_id, int device_id, struct dcmi_chip_info_v2 *chip_info)
{
    const struct fake_dev *d;
    int ret = enter_dev("dcmi_get_device_chip_info_v2", card_id, device_id, &d);

    if (ret != DCMI_OK) {
        return ret;
    }
    memset(chip_info, 0, sizeof(*chip_info));
    fill_chip(d, chip_info->chip_type, chip_info->chip_name, chip_info->chip_ver, &chip_info->aicore_cnt);
    snprintf((char *)chip_info->npu_name, MAX_CHIP_NAME_LEN, "%s", d->npu_name);
    return DCMI_OK;
}
#endif

int dcmi_get_device_board_info(int card_id, int device_id, struct dcmi_board_info *board_info)
{
    const struct fake_dev *d;
    int ret = enter_dev("dcmi_get_device_board_info", card_id, device_id, &d);

    if (ret != DCMI_OK) {
        return ret;
    }
    if (!d->has_board) {
        return DCMI_ERR_CODE_NOT_SUPPORT;
    }
    memset(board_info, 0, sizeof(*board_info));
    board_info->board_id = d->board;
    board_info->slot_id = (unsigned int)card_id;
    return DCMI_OK;
}

/* As the driver does: the caller's ip_type picks the family; a port without that address answers zeros. */
int dcmi_get_device_ip(int card_id, int device_id, int input_type, int port_id, struct dcmi_ip_addr *ip,
                       struct dcmi_ip_addr *mask)
{
    const struct fake_dev *d;
    int ret = enter_dev("dcmi_get_device_ip", card_id, device_id, &d);
    int family;

    if (ret != DCMI_OK) {
        return ret;
    }
    if (input_type != DCMI_ROCE_PORT || port_id != 0) {
        return DCMI_ERR_CODE_INVALID_PARAMETER;
    }
    family = ip->ip_type == 1 ? AF_INET6 : AF_INET;
    memset(&ip->u_addr, 0, sizeof(ip->u_addr));
    memset(mask, 0, sizeof(*mask));
    if (d->ip_family == family) {
        memcpy(ip->u_addr.ip6, d->ip, family == AF_INET ? 4 : 16);
    }
    return DCMI_OK;
}

int dcmi_get_device_network_health(int card_id, int device_id, unsigned int *result)
{
    const struct fake_dev *d;
    int ret = enter_dev("dcmi_get_device_network_health", card_id, device_id, &d);

    if (ret != DCMI_OK) {
        return ret;
    }
    if (!d->has_net_health) {
        return DCMI_ERR_CODE_NOT_SUPPORT;
    }
    *result = d->net_health;
    return DCMI_OK;
}

static int spod_info(const struct fake_dev *d, void *buf, unsigned int *size)
{
    struct dcmi_spod_info *info = buf;

    if (!d->has_spod) {
        return DCMI_ERR_CODE_NOT_SUPPORT;
    }
    if (*size < sizeof(*info)) {
        return DCMI_ERR_CODE_INVALID_PARAMETER;
    }
    memset(info, 0, sizeof(*info));
    info->super_pod_id = d->spod_id;
    info->server_index = d->spod_server;
    info->chassis_id = d->spod_chassis;
    return DCMI_OK;
}

int dcmi_get_device_hbm_info(int card_id, int device_id, struct dcmi_hbm_info *hbm_info)
{
    const struct fake_dev *d;
    int ret = enter_dev("dcmi_get_device_hbm_info", card_id, device_id, &d);

    if (ret != DCMI_OK) {
        return ret;
    }
    if (!d->has_hbm) {
        return DCMI_ERR_CODE_NOT_SUPPORT;
    }
    memset(hbm_info, 0, sizeof(*hbm_info));
    hbm_info->memory_size = d->hbm_mb;
    hbm_info->freq = 1600;
    hbm_info->memory_usage = d->hbm_mb / 16;
    hbm_info->temp = 40;
    return DCMI_OK;
}

int dcmi_get_device_memory_info_v3(int card_id, int device_id, struct dcmi_get_memory_info_stru *memory_info)
{
    const struct fake_dev *d;
    int ret = enter_dev("dcmi_get_device_memory_info_v3", card_id, device_id, &d);

    if (ret != DCMI_OK) {
        return ret;
    }
    if (!d->has_ddr) {
        return DCMI_ERR_CODE_NOT_SUPPORT;
    }
    memset(memory_info, 0, sizeof(*memory_info));
    memory_info->memory_size = d->ddr_mb;
    memory_info->memory_available = d->ddr_mb / 2;
    memory_info->hugepagesize = 2048;
    return DCMI_OK;
}

int dcmi_get_device_pcie_info_v2(int card_id, int device_id, struct dcmi_pcie_info_all *pcie_info)
{
    const struct fake_dev *d;
    int ret = enter_dev("dcmi_get_device_pcie_info_v2", card_id, device_id, &d);

    if (ret != DCMI_OK) {
        return ret;
    }
    if (!d->has_bus) {
        return DCMI_ERR_CODE_NOT_SUPPORT;
    }
    memset(pcie_info, 0, sizeof(*pcie_info));
    pcie_info->venderid = 0x19e5; /* Huawei */
    pcie_info->deviceid = 0xd802;
    pcie_info->domain = (int)d->domain;
    pcie_info->bdf_busid = d->bus;
    pcie_info->bdf_deviceid = d->devno;
    pcie_info->bdf_funcid = d->func;
    return DCMI_OK;
}

static int topo_of(int phy1, int phy2)
{
    int i, j, seen1, seen2;

    if (phy1 == phy2) {
        return DCMI_TOPO_TYPE_SELF;
    }
    for (i = 0; i < g_host.ngroups; i++) {
        seen1 = seen2 = 0;
        for (j = 0; j < g_host.groups[i].count; j++) {
            seen1 |= g_host.groups[i].phys[j] == phy1;
            seen2 |= g_host.groups[i].phys[j] == phy2;
        }
        if (seen1 && seen2) {
            return g_host.groups[i].type;
        }
    }
    return g_host.topo_default;
}

int dcmi_get_topo_info_by_device_id(int card_id1, int device_id1, int card_id2, int device_id2, int *topo_type)
{
    const struct fake_dev *d1, *d2;
    int ret = enter_dev("dcmi_get_topo_info_by_device_id", card_id1, device_id1, &d1);

    if (ret != DCMI_OK) {
        return ret;
    }
    if ((d2 = find_dev(card_id2, device_id2)) == NULL) {
        return DCMI_ERR_CODE_INVALID_DEVICE_ID;
    }
    if (!g_host.has_topo) {
        return DCMI_ERR_CODE_NOT_SUPPORT;
    }
    *topo_type = topo_of(d1->phy, d2->phy);
    return DCMI_OK;
}

#ifndef FAKE_DCMI_LEGACY
int dcmi_get_driver_version(char *driver_ver, unsigned int len)
{
    int ret = enter("dcmi_get_driver_version", -1, -1);

    if (ret != DCMI_OK) {
        return ret;
    }
    return g_host.has_driver ? copy_string(driver_ver, len, g_host.driver) : DCMI_ERR_CODE_NOT_SUPPORT;
}
#endif

/* The library's own version, which is not the driver's: npu-plugin must never report it. */
int dcmi_get_dcmi_version(char *dcmi_ver, unsigned int len)
{
    int ret = enter("dcmi_get_dcmi_version", -1, -1);

    return ret != DCMI_OK ? ret : copy_string(dcmi_ver, len, FAKE_DCMI_LIBRARY_VERSION);
}

/* ---- vNPUs ---- */

static const struct fake_total *find_total(int card, int dev)
{
    int i;

    for (i = 0; i < g_host.ntotals; i++) {
        if (g_host.totals[i].card == card && g_host.totals[i].dev == dev) {
            return &g_host.totals[i];
        }
    }
    return NULL;
}

static const struct fake_template *find_template(const char *name)
{
    int i;

    for (i = 0; i < g_host.ntemplates; i++) {
        if (strcmp(g_host.templates[i].name, name) == 0) {
            return &g_host.templates[i];
        }
    }
    return NULL;
}

static int same_vnpu(const struct fake_vnpu *a, const struct fake_vnpu *b)
{
    return a->card == b->card && a->dev == b->dev && a->id == b->id;
}

static int was_destroyed(const struct fake_vnpu *v)
{
    int i;

    for (i = 0; i < g_ndestroyed; i++) {
        if (same_vnpu(&g_destroyed[i], v)) {
            return 1;
        }
    }
    return 0;
}

/* The vNPUs that exist now (card < 0: on every chip): configured ones not destroyed, then created ones. */
static int live_vnpus(int card, int dev, const struct fake_vnpu **out)
{
    int i, n = 0;

    for (i = 0; i < g_host.nvnpus; i++) {
        const struct fake_vnpu *v = &g_host.vnpus[i];
        if ((card < 0 || (v->card == card && v->dev == dev)) && !was_destroyed(v)) {
            out[n++] = v;
        }
    }
    for (i = 0; i < g_ncreated; i++) {
        if (card < 0 || (g_created[i].card == card && g_created[i].dev == dev)) {
            out[n++] = &g_created[i];
        }
    }
    return n;
}

static void fill_res(const struct fake_res *r, struct dcmi_computing_resource *c, struct dcmi_media_resource *m)
{
    c->aic = r->aic;
    c->device_aicpu = (unsigned short)r->aicpu; /* -1 becomes 0xFFFF, the driver's NA */
    c->memory_size = r->mem;
    m->vpc = r->vpc;
    m->venc = r->venc;
    m->vdec = r->vdec;
    m->jpegd = r->jpegd;
    m->jpege = r->jpege;
    m->pngd = r->pngd;
}

static float less(float total, float used)
{
    return total < 0 ? total : total - used;
}

/* The chip's totals minus what its live vNPUs' templates use; NA stays NA. */
static struct fake_res free_res(const struct fake_total *t)
{
    const struct fake_vnpu *live[FAKE_MAX_VNPUS];
    struct fake_res r = t->res;
    int i, n = live_vnpus(t->card, t->dev, live);

    for (i = 0; i < n; i++) {
        const struct fake_template *tp = find_template(live[i]->template_name);
        if (tp == NULL) {
            continue;
        }
        r.aic = less(r.aic, tp->res.aic);
        r.aicpu = r.aicpu < 0 ? r.aicpu : r.aicpu - tp->res.aicpu;
        r.mem -= tp->res.mem;
        r.vpc = less(r.vpc, tp->res.vpc);
        r.venc = less(r.venc, tp->res.venc);
        r.vdec = less(r.vdec, tp->res.vdec);
        r.jpegd = less(r.jpegd, tp->res.jpegd);
        r.jpege = less(r.jpege, tp->res.jpege);
        r.pngd = less(r.pngd, tp->res.pngd);
    }
    return r;
}

static int query_one(int card, int dev, struct dcmi_vdev_query_stru *q)
{
    const struct fake_vnpu *live[FAKE_MAX_VNPUS];
    int i, n = live_vnpus(card, dev, live);
    unsigned int id = q->vdev_id;

    for (i = 0; i < n; i++) {
        const struct fake_template *tp = find_template(live[i]->template_name);
        if (live[i]->id != id) {
            continue;
        }
        memset(q, 0, sizeof(*q));
        q->vdev_id = id;
        snprintf(q->query_info.name, sizeof(q->query_info.name), "%.15s", live[i]->template_name);
        q->query_info.vfid = (unsigned int)i + 1;
        q->query_info.vfg_id = (unsigned int)i;
        q->query_info.base.vfg_id = (unsigned int)i;
        if (tp != NULL) {
            fill_res(&tp->res, &q->query_info.computing, &q->query_info.media);
        }
        return DCMI_OK;
    }
    return DCMI_ERR_CODE_DEVICE_NOT_EXIST;
}

int dcmi_get_device_info(int card_id, int device_id, int main_cmd, unsigned int sub_cmd, void *buf, unsigned int *size)
{
    const struct fake_dev *d;
    const struct fake_total *t;
    int ret = enter_dev("dcmi_get_device_info", card_id, device_id, &d);

    if (ret != DCMI_OK) {
        return ret;
    }
    if (main_cmd == DCMI_MAIN_CMD_CHIP_INF && sub_cmd == DCMI_CHIP_INF_SUB_CMD_SPOD_INFO) {
        return spod_info(d, buf, size);
    }
    if (main_cmd != DCMI_MAIN_CMD_VDEV_MNG || (t = find_total(card_id, device_id)) == NULL) {
        return DCMI_ERR_CODE_NOT_SUPPORT;
    }
    if (sub_cmd == 0) {
        return *size < sizeof(struct dcmi_vdev_query_stru) ? DCMI_ERR_CODE_INVALID_PARAMETER : query_one(card_id, device_id, buf);
    }
    if (sub_cmd == 1) {
        struct dcmi_soc_total_resource *total = buf;
        const struct fake_vnpu *live[FAKE_MAX_VNPUS];
        int i, n;
        if (*size < sizeof(*total)) {
            return DCMI_ERR_CODE_INVALID_PARAMETER;
        }
        memset(total, 0, sizeof(*total));
        n = live_vnpus(card_id, device_id, live);
        for (i = 0; i < n && i < DCMI_SOC_SPLIT_MAX; i++) {
            total->vdev_id[i] = live[i]->id;
        }
        total->vdev_num = (unsigned int)i;
        fill_res(&t->res, &total->computing, &total->media);
        return DCMI_OK;
    }
    if (sub_cmd == 2) {
        struct dcmi_soc_free_resource *free_out = buf;
        struct fake_res r = free_res(t);
        if (*size < sizeof(*free_out)) {
            return DCMI_ERR_CODE_INVALID_PARAMETER;
        }
        memset(free_out, 0, sizeof(*free_out));
        fill_res(&r, &free_out->computing, &free_out->media);
        return DCMI_OK;
    }
    return DCMI_ERR_CODE_NOT_SUPPORT;
}

static int id_in_use(unsigned int id)
{
    const struct fake_vnpu *live[FAKE_MAX_VNPUS];
    int i, n = live_vnpus(-1, -1, live);

    for (i = 0; i < n; i++) {
        if (live[i]->id == id) {
            return 1;
        }
    }
    return 0;
}

static int pick_id(const struct fake_dev *d, unsigned int wanted, unsigned int *id)
{
    unsigned int first = (unsigned int)d->phy * 16 + 100, last = first + 15;

    if (wanted == FAKE_ANY_ID) {
        for (wanted = first; wanted <= last && id_in_use(wanted); wanted++) {
        }
    }
    if (wanted < first || wanted > last || wanted == FAKE_DESTROY_ALL || id_in_use(wanted)) {
        return DCMI_ERR_CODE_INVALID_PARAMETER;
    }
    *id = wanted;
    return DCMI_OK;
}

int dcmi_create_vdevice(int card_id, int device_id, struct dcmi_create_vdev_res_stru *vdev,
                        struct dcmi_create_vdev_out *out)
{
    const struct fake_dev *d;
    const struct fake_total *t;
    const struct fake_template *tp;
    const struct fake_vnpu *live[FAKE_MAX_VNPUS];
    struct fake_res left;
    struct fake_vnpu *made;
    unsigned int id;
    int ret = enter_dev("dcmi_create_vdevice", card_id, device_id, &d);

    if (ret != DCMI_OK) {
        return ret;
    }
    if ((t = find_total(card_id, device_id)) == NULL) {
        return DCMI_ERR_CODE_NOT_SUPPORT;
    }
    if (g_host.has_vnpu_mode && g_host.vnpu_mode != 0) {
        return DCMI_ERR_CODE_OPER_NOT_PERMITTED;
    }
    if ((tp = find_template(vdev->template_name)) == NULL || (ret = pick_id(d, vdev->vdev_id, &id)) != DCMI_OK) {
        return DCMI_ERR_CODE_INVALID_PARAMETER;
    }
    left = free_res(t);
    if (live_vnpus(card_id, device_id, live) >= DCMI_SOC_SPLIT_MAX || g_ncreated >= FAKE_MAX_VNPUS) {
        return DCMI_ERR_CODE_INVALID_PARAMETER;
    }
    if (left.aic < tp->res.aic || (left.aicpu >= 0 && left.aicpu < tp->res.aicpu)) {
        return DCMI_ERR_CODE_INNER_ERR; /* the driver's "check aicore num failed" */
    }
    made = &g_created[g_ncreated++];
    made->card = card_id;
    made->dev = device_id;
    made->id = id;
    snprintf(made->template_name, sizeof(made->template_name), "%s", tp->name);
    memset(out, 0, sizeof(*out));
    out->vdev_id = id;
    out->vfg_id = (unsigned int)live_vnpus(card_id, device_id, live) - 1;
    return DCMI_OK;
}

/* Destroy one live vNPU of the chip; nonzero when it has none with that id. */
static int destroy_one(int card, int dev, unsigned int id)
{
    struct fake_vnpu key = {card, dev, id, ""};
    int i;

    for (i = 0; i < g_ncreated; i++) {
        if (same_vnpu(&g_created[i], &key)) {
            g_created[i] = g_created[--g_ncreated];
            return 0;
        }
    }
    for (i = 0; i < g_host.nvnpus; i++) {
        if (same_vnpu(&g_host.vnpus[i], &key) && !was_destroyed(&key) && g_ndestroyed < FAKE_MAX_VNPUS) {
            g_destroyed[g_ndestroyed++] = key;
            return 0;
        }
    }
    return -1;
}

int dcmi_set_destroy_vdevice(int card_id, int device_id, unsigned int vdevid)
{
    const struct fake_dev *d;
    const struct fake_vnpu *live[FAKE_MAX_VNPUS];
    unsigned int ids[FAKE_MAX_VNPUS];
    int i, n, ret = enter_dev("dcmi_set_destroy_vdevice", card_id, device_id, &d);

    if (ret != DCMI_OK) {
        return ret;
    }
    if (find_total(card_id, device_id) == NULL) {
        return DCMI_ERR_CODE_NOT_SUPPORT;
    }
    if (vdevid != FAKE_DESTROY_ALL) {
        return destroy_one(card_id, device_id, vdevid) == 0 ? DCMI_OK : DCMI_ERR_CODE_DEVICE_NOT_EXIST;
    }
    n = live_vnpus(card_id, device_id, live);
    for (i = 0; i < n; i++) {
        ids[i] = live[i]->id;
    }
    for (i = 0; i < n; i++) {
        destroy_one(card_id, device_id, ids[i]);
    }
    return DCMI_OK;
}

#ifndef FAKE_DCMI_LEGACY
int dcmi_get_vdevice_mode(int *mode)
{
    int ret = enter("dcmi_get_vdevice_mode", -1, -1);

    if (ret != DCMI_OK) {
        return ret;
    }
    if (!g_host.has_vnpu_mode) {
        return DCMI_ERR_CODE_NOT_SUPPORT;
    }
    *mode = g_host.vnpu_mode;
    return DCMI_OK;
}
#endif

/* ---- not DCMI: lets tests compare ctypes layouts with this compiler's ---- */

#define FAKE_LAYOUT(s, f) \
    if (strcmp(structure, #s) == 0 && field != NULL && strcmp(field, #f) == 0) return (long)offsetof(struct s, f)
#define FAKE_SIZE(s) \
    if (strcmp(structure, #s) == 0 && field == NULL) return (long)sizeof(struct s)

long fake_dcmi_layout(const char *structure, const char *field)
{
    FAKE_SIZE(dcmi_ip_addr);
    FAKE_LAYOUT(dcmi_ip_addr, ip_type);
    FAKE_SIZE(dcmi_spod_info);
    FAKE_LAYOUT(dcmi_spod_info, super_pod_id);
    FAKE_LAYOUT(dcmi_spod_info, server_index);
    FAKE_LAYOUT(dcmi_spod_info, chassis_id);
    FAKE_SIZE(dcmi_chip_info);
    FAKE_LAYOUT(dcmi_chip_info, chip_name);
    FAKE_LAYOUT(dcmi_chip_info, aicore_cnt);
    FAKE_SIZE(dcmi_chip_info_v2);
    FAKE_LAYOUT(dcmi_chip_info_v2, aicore_cnt);
    FAKE_LAYOUT(dcmi_chip_info_v2, npu_name);
    FAKE_SIZE(dcmi_board_info);
    FAKE_LAYOUT(dcmi_board_info, board_id);
    FAKE_LAYOUT(dcmi_board_info, slot_id);
    FAKE_SIZE(dcmi_pcie_info_all);
    FAKE_LAYOUT(dcmi_pcie_info_all, domain);
    FAKE_LAYOUT(dcmi_pcie_info_all, bdf_busid);
    FAKE_LAYOUT(dcmi_pcie_info_all, bdf_funcid);
    FAKE_SIZE(dcmi_hbm_info);
    FAKE_LAYOUT(dcmi_hbm_info, memory_usage);
    FAKE_LAYOUT(dcmi_hbm_info, bandwith_util_rate);
    FAKE_SIZE(dcmi_get_memory_info_stru);
    FAKE_LAYOUT(dcmi_get_memory_info_stru, hugepagesize);
    FAKE_LAYOUT(dcmi_get_memory_info_stru, utiliza);
    FAKE_LAYOUT(dcmi_get_memory_info_stru, reserve);
    FAKE_SIZE(dcmi_create_vdev_res_stru);
    FAKE_LAYOUT(dcmi_create_vdev_res_stru, template_name);
    FAKE_LAYOUT(dcmi_create_vdev_res_stru, reserved);
    FAKE_SIZE(dcmi_create_vdev_out);
    FAKE_LAYOUT(dcmi_create_vdev_out, vfg_id);
    FAKE_SIZE(dcmi_base_resource);
    FAKE_LAYOUT(dcmi_base_resource, vfg_id);
    FAKE_LAYOUT(dcmi_base_resource, vip_mode);
    FAKE_SIZE(dcmi_computing_resource);
    FAKE_LAYOUT(dcmi_computing_resource, memory_size);
    FAKE_LAYOUT(dcmi_computing_resource, device_aicpu);
    FAKE_LAYOUT(dcmi_computing_resource, vdev_aicore_utilization);
    FAKE_LAYOUT(dcmi_computing_resource, vdev_memory_free);
    FAKE_LAYOUT(dcmi_computing_resource, reserved);
    FAKE_SIZE(dcmi_media_resource);
    FAKE_LAYOUT(dcmi_media_resource, venc);
    FAKE_SIZE(dcmi_vdev_query_info);
    FAKE_LAYOUT(dcmi_vdev_query_info, container_id);
    FAKE_LAYOUT(dcmi_vdev_query_info, base);
    FAKE_LAYOUT(dcmi_vdev_query_info, computing);
    FAKE_LAYOUT(dcmi_vdev_query_info, media);
    FAKE_SIZE(dcmi_vdev_query_stru);
    FAKE_LAYOUT(dcmi_vdev_query_stru, query_info);
    FAKE_SIZE(dcmi_soc_free_resource);
    FAKE_LAYOUT(dcmi_soc_free_resource, base);
    FAKE_LAYOUT(dcmi_soc_free_resource, computing);
    FAKE_LAYOUT(dcmi_soc_free_resource, media);
    FAKE_SIZE(dcmi_soc_total_resource);
    FAKE_LAYOUT(dcmi_soc_total_resource, vfg_num);
    FAKE_LAYOUT(dcmi_soc_total_resource, base);
    FAKE_LAYOUT(dcmi_soc_total_resource, computing);
    FAKE_LAYOUT(dcmi_soc_total_resource, media);
    return -1;
}
