/* corpus.c: see corpus.h. */
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "buf.h"
#include "corpus.h"

char *corpus_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    struct st_buf b;
    char chunk[8192];
    size_t n;
    if (!f)
        return NULL;
    st_buf_init(&b);
    st_buf_adds(&b, "");
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        st_buf_add(&b, chunk, n);
    fclose(f);
    *len = b.len;
    return b.data;
}

void corpus_lines(const char *text, size_t len, corpus_fn fn, void *arg)
{
    size_t i = 0;
    while (i < len) {
        const char *nl = memchr(text + i, '\n', len - i);
        size_t end = nl ? (size_t)(nl - text) : len;
        fn(text + i, end - i, arg);
        i = end + 1;
    }
}

size_t corpus_tree(const char *dir, corpus_fn fn, void *arg)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    size_t files = 0;
    if (!d)
        return 0;
    while ((e = readdir(d))) {
        char path[4096];
        struct stat st;
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        if (stat(path, &st))
            continue;
        if (S_ISDIR(st.st_mode)) {
            files += corpus_tree(path, fn, arg);
            continue;
        }
        size_t len;
        char *text = corpus_slurp(path, &len);
        if (!text)
            continue;
        corpus_lines(text, len, fn, arg);
        if (len < 65536)
            fn(text, len, arg);
        free(text);
        files++;
    }
    closedir(d);
    return files;
}

int corpus_generated(const char *head, const char *tail, corpus_fn fn, void *arg)
{
    char tmp[] = "/tmp/st_corpus_XXXXXX";
    int fd = mkstemp(tmp);
    ck_assert(fd >= 0);
    close(fd);
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "%s%s%s", head, tmp, tail);
    if (system(cmd) != 0) {
        unlink(tmp);
        return -1;
    }
    size_t len;
    char *text = corpus_slurp(tmp, &len);
    ck_assert_msg(text && len > 100000, "%s wrote too little", cmd);
    corpus_lines(text, len, fn, arg);
    free(text);
    unlink(tmp);
    return 0;
}

int corpus_same_str(const char *a, const char *b)
{
    return a == b || (a && b && strcmp(a, b) == 0);
}

int corpus_same_json(const struct cJSON *a, const struct cJSON *b)
{
    if (!a || !b)
        return a == b;
    char *x = cJSON_PrintUnformatted(a), *y = cJSON_PrintUnformatted(b);
    int same = x && y && strcmp(x, y) == 0;
    free(x);
    free(y);
    return same;
}
