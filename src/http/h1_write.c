/*
 * HTTP/1 head serialisation.  Heads are built into a string builder over
 * workspace, then sent with the first body bytes in one writev(2).
 */
#include "config.h"

#include "surogat/defs.h"
#include "surogat/h1.h"
#include "surogat/http.h"
#include "surogat/sb.h"

static void
write_fields(struct sb *sb, const struct http *hp)
{
    for (unsigned i = 0; i < hp->nhdr; i++) {
        sb_bcat(sb, hp->hdr[i].name.b, hp->hdr[i].name.len);
        sb_bcat(sb, ": ", 2);
        sb_bcat(sb, hp->hdr[i].val.b, hp->hdr[i].val.len);
        sb_bcat(sb, "\r\n", 2);
    }
    sb_bcat(sb, "\r\n", 2);
}

void
h1_write_request(struct sb *sb, const struct http *hp)
{
    OBJ_CHECK(hp, HTTP_MAGIC);
    sb_bcat(sb, hp->method.b, hp->method.len);
    sb_bcat(sb, " ", 1);
    sb_bcat(sb, hp->url.b, hp->url.len);
    sb_cat(sb, hp->proto == 10 ? " HTTP/1.0\r\n" : " HTTP/1.1\r\n");
    write_fields(sb, hp);
}

void
h1_write_response(struct sb *sb, const struct http *hp)
{
    char status[4];

    OBJ_CHECK(hp, HTTP_MAGIC);
    SRG_ASSERT(hp->status >= 100 && hp->status <= 999);
    status[0] = (char)('0' + hp->status / 100);
    status[1] = (char)('0' + hp->status / 10 % 10);
    status[2] = (char)('0' + hp->status % 10);
    status[3] = ' ';
    sb_cat(sb, hp->proto == 10 ? "HTTP/1.0 " : "HTTP/1.1 ");
    sb_bcat(sb, status, 4);
    sb_bcat(sb, hp->reason.b, hp->reason.len);
    sb_bcat(sb, "\r\n", 2);
    write_fields(sb, hp);
}
