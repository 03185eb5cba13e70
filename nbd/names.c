/* nbd/names.c: names of wire values, and errno -> NBD error mapping. */
#include <errno.h>

#include "names.h"
#include "protocol.h"

const char *nbd_cmd_name(uint16_t cmd)
{
    static const char *const names[] = {
        "NBD_CMD_READ",         "NBD_CMD_WRITE",        "NBD_CMD_DISC",
        "NBD_CMD_FLUSH",        "NBD_CMD_TRIM",         "NBD_CMD_CACHE",
        "NBD_CMD_WRITE_ZEROES", "NBD_CMD_BLOCK_STATUS", "NBD_CMD_RESIZE",
    };
    return cmd < sizeof names / sizeof names[0] ? names[cmd] : "unknown command";
}

const char *nbd_opt_name(uint32_t opt)
{
    static const char *const names[] = {
        "0",
        "NBD_OPT_EXPORT_NAME",
        "NBD_OPT_ABORT",
        "NBD_OPT_LIST",
        "NBD_OPT_PEEK_EXPORT",
        "NBD_OPT_STARTTLS",
        "NBD_OPT_INFO",
        "NBD_OPT_GO",
        "NBD_OPT_STRUCTURED_REPLY",
        "NBD_OPT_LIST_META_CONTEXT",
        "NBD_OPT_SET_META_CONTEXT",
        "NBD_OPT_EXTENDED_HEADERS",
    };
    return opt < sizeof names / sizeof names[0] ? names[opt] : "unknown option";
}

const char *nbd_rep_name(uint32_t rep)
{
    switch (rep) {
    case NBD_REP_ACK:
        return "NBD_REP_ACK";
    case NBD_REP_SERVER:
        return "NBD_REP_SERVER";
    case NBD_REP_INFO:
        return "NBD_REP_INFO";
    case NBD_REP_META_CONTEXT:
        return "NBD_REP_META_CONTEXT";
    case NBD_REP_ERR_UNSUP:
        return "NBD_REP_ERR_UNSUP";
    case NBD_REP_ERR_POLICY:
        return "NBD_REP_ERR_POLICY";
    case NBD_REP_ERR_INVALID:
        return "NBD_REP_ERR_INVALID";
    case NBD_REP_ERR_PLATFORM:
        return "NBD_REP_ERR_PLATFORM";
    case NBD_REP_ERR_TLS_REQD:
        return "NBD_REP_ERR_TLS_REQD";
    case NBD_REP_ERR_UNKNOWN:
        return "NBD_REP_ERR_UNKNOWN";
    case NBD_REP_ERR_SHUTDOWN:
        return "NBD_REP_ERR_SHUTDOWN";
    case NBD_REP_ERR_BLOCK_SIZE_REQD:
        return "NBD_REP_ERR_BLOCK_SIZE_REQD";
    case NBD_REP_ERR_TOO_BIG:
        return "NBD_REP_ERR_TOO_BIG";
    case NBD_REP_ERR_EXT_HEADER_REQD:
        return "NBD_REP_ERR_EXT_HEADER_REQD";
    default:
        return "unknown reply";
    }
}

const char *nbd_err_name(uint32_t err)
{
    switch (err) {
    case 0:
        return "success";
    case NBD_EPERM:
        return "EPERM";
    case NBD_EIO:
        return "EIO";
    case NBD_ENOMEM:
        return "ENOMEM";
    case NBD_EINVAL:
        return "EINVAL";
    case NBD_ENOSPC:
        return "ENOSPC";
    case NBD_EOVERFLOW:
        return "EOVERFLOW";
    case NBD_ENOTSUP:
        return "ENOTSUP";
    case NBD_ESHUTDOWN:
        return "ESHUTDOWN";
    default:
        return "unknown error";
    }
}

uint32_t nbd_errno_to_wire(int err)
{
    switch (err) {
    case 0:
        return 0;
    case EPERM:
    case EROFS:
        return NBD_EPERM;
    case EIO:
        return NBD_EIO;
    case ENOMEM:
        return NBD_ENOMEM;
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
        return NBD_ENOSPC;
    case EOVERFLOW:
        return NBD_EOVERFLOW;
    case ENOTSUP:
        return NBD_ENOTSUP;
    case ESHUTDOWN:
        return NBD_ESHUTDOWN;
    case EINVAL:
        return NBD_EINVAL;
    default:
        /* A failure of the storage, not of the request. */
        return NBD_EIO;
    }
}
