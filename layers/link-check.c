/* layers/link-check.c: the whole program of the link checks of
 * meson.build (layer-check-NAME).  Linked with one layer's whole library
 * and only the layers below it, it fails to link when that layer calls
 * upwards.  Not a test of behaviour: there is nothing to run. */
int main(void)
{
    return 0;
}
