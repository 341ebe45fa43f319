/* A C program linked against libsluice.a (sluice::sluice_static). */
#include <sluice.h>

#include <stdio.h>
#include <string.h>

int main(void) {
  sluice_device_t dev;
  sluice_stream_t s;
  sluice_buffer_t b;
  const char msg[] = "static link";
  char out[sizeof msg];
  sluice_error_t* e = sluice_device_open(SLUICE_BACKEND_HOST, 0, &dev);
  if (!e) e = sluice_stream_create(dev, 0, 0, &s);
  if (!e) e = sluice_buffer_alloc(s, sizeof msg, &b);
  if (!e) e = sluice_stream_copy_from_host(s, b, 0, msg, sizeof msg);
  if (!e) e = sluice_stream_copy_to_host(s, out, b, 0, sizeof out);
  if (e) {
    printf("error %s: %s\n", sluice_error_code_name(sluice_error_code(e)), sluice_error_message(e));
    sluice_error_free(e);
    return 1;
  }
  sluice_error_free(sluice_buffer_free(b));
  sluice_error_free(sluice_stream_destroy(s));
  sluice_error_free(sluice_device_close(dev));
  printf("%s %s: %s\n", msg, sluice_version(), strcmp(out, msg) == 0 ? "ok" : "FAILED");
  return strcmp(out, msg) == 0 ? 0 : 1;
}
