/*
 * Backends for the director tests: declared as a policy would, without a
 * probe (healthy), on the discard port of 127.0.0.1, never connected to.
 */
#ifndef SUROGAT_TEST_BE_FIXTURE_H
#define SUROGAT_TEST_BE_FIXTURE_H

#include <string.h>

#include "unit.h"
#include "surogat/be.h"
#include "surogat/sb.h"

static struct be *
mkbe_err(const char *name, unsigned weight, struct sb *err)
{
    struct be_conf c;
    struct be *be;

    memset(&c, 0, sizeof c);
    c.name = name;
    c.host = "127.0.0.1";
    c.port = "9";
    c.weight = weight;
    c.connect_timeout = c.first_byte_timeout = c.between_bytes_timeout = -1;
    ck_assert_msg(be_get(&c, &be, err) == 0, "%s", err->buf);
    return (be);
}

#endif
