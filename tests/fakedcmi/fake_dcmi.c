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
 *   driver 24.1.rc2                      # dcmi_get_driver_version (no line: NOT_SUPPORT)
 *   topo_group 3 0 1 2 3 4 5 6 7         # DCMI topo type for every pair of these physical ids
 *   topo_default 1                       # type for pairs in no group (no topo line: NOT_SUPPORT)
 *   fail dcmi_init -8005                 # make a call fail everywhere ...
 *   fail dcmi_get_device_health card 0 dev 0 -8001   # ... or for one device only
 *
 * Build with -DFAKE_DCMI_LEGACY to drop the symbols older drivers lack (dcmi_get_card_list,
 * dcmi_get_driver_version, dcmi_get_device_chip_info_v2): the card list is then only
 * dcmi_get_card_num_list, the version only dcmi_get_dcmi_version (the library's own).
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CHIP_NAME_LEN 32
#define MAX_CARD_NUM 64
#define FAKE_MAX_DEVS 64
#define FAKE_MAX_FAILS 64
#define FAKE_MAX_GROUPS 16
#define FAKE_LINE_LEN 512
#define FAKE_DCMI_LIBRARY_VERSION "7.35.23"

#define DCMI_OK 0
#define DCMI_ERROR_CODE_BASE (-8000)
#define DCMI_ERR_CODE_INVALID_PARAMETER (DCMI_ERROR_CODE_BASE - 1)
#define DCMI_ERR_CODE_INNER_ERR (DCMI_ERROR_CODE_BASE - 5)
#define DCMI_ERR_CODE_INVALID_DEVICE_ID (DCMI_ERROR_CODE_BASE - 7)
#define DCMI_ERR_CODE_NOT_REDAY (DCMI_ERROR_CODE_BASE - 12)
#define DCMI_ERR_CODE_NOT_SUPPORT (DCMI_ERROR_CODE_BASE - 255)

#define DCMI_TOPO_TYPE_SELF 0

/* ---- struct layouts, verbatim from dcmi_interface_api.h ---- */

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

struct fake_host {
    int ndevs, nfails, ngroups, has_topo, topo_default, has_driver;
    struct fake_dev devs[FAKE_MAX_DEVS];
    struct fake_fail fails[FAKE_MAX_FAILS];
    struct fake_group groups[FAKE_MAX_GROUPS];
    char driver[64];
};

static struct fake_host g_host;
static int g_initialized;

static int parse_bus(const char *text, struct fake_dev *d)
{
    if (sscanf(text, "%x:%x:%x.%x", &d->domain, &d->bus, &d->devno, &d->func) != 4) {
        return -1;
    }
    d->has_bus = 1;
    return 0;
}

static int parse_dev_pair(struct fake_dev *d, const char *key, const char *val)
{
    if (strcmp(key, "card") == 0) { d->card = atoi(val); return 0; }
    if (strcmp(key, "dev") == 0) { d->dev = atoi(val); return 0; }
    if (strcmp(key, "logic") == 0) { d->logic = atoi(val); return 0; }
    if (strcmp(key, "phy") == 0) { d->phy = atoi(val); return 0; }
    if (strcmp(key, "health") == 0) { d->health = (unsigned int)strtoul(val, NULL, 0); return 0; }
    if (strcmp(key, "aicore") == 0) { d->aicore = (unsigned int)strtoul(val, NULL, 0); return 0; }
    if (strcmp(key, "hbm_mb") == 0) { d->hbm_mb = strtoull(val, NULL, 0); d->has_hbm = 1; return 0; }
    if (strcmp(key, "ddr_mb") == 0) { d->ddr_mb = strtoull(val, NULL, 0); d->has_ddr = 1; return 0; }
    if (strcmp(key, "bus") == 0) { return parse_bus(val, d); }
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
    if (strcmp(word, "driver") == 0) {
        g_host.has_driver = 1;
        return sscanf(line + used, "%63s", g_host.driver) == 1 ? 0 : -1;
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

/* The common prologue of every entry point: fresh config, init done, no injected failure. */
static int enter(const char *call, int card, int dev)
{
    if (load_host() != 0) {
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

/* ---- not DCMI: lets tests compare ctypes layouts with this compiler's ---- */

#define FAKE_LAYOUT(s, f) \
    if (strcmp(structure, #s) == 0 && field != NULL && strcmp(field, #f) == 0) return (long)offsetof(struct s, f)
#define FAKE_SIZE(s) \
    if (strcmp(structure, #s) == 0 && field == NULL) return (long)sizeof(struct s)

long fake_dcmi_layout(const char *structure, const char *field)
{
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
    return -1;
}
