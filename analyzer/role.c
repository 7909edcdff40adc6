/* role.c: analyzer.role (see role.h). */
#include <string.h>

#include "role.h"

static const char *const names[] = {"all", "store", "detect"};

int st_role_parse(const char *name)
{
    for (int i = 0; i < (int)(sizeof(names) / sizeof(names[0])); i++)
        if (name && strcmp(name, names[i]) == 0)
            return i;
    return -1;
}

const char *st_role_name(enum st_role role)
{
    return names[role];
}

int st_role_stores(enum st_role role)
{
    return role != ST_ROLE_DETECT;
}

int st_role_detects(enum st_role role)
{
    return role != ST_ROLE_STORE;
}
