/* valset: the official ILSVRC2012 validation set as a manifest labelled by a training split's
 * classes.txt (docs/DESIGN.md §2, "ILSVRC2012 validation set").
 *
 * The images are one folder of ILSVRC2012_val_00000001.JPEG ... with no class folders. Their
 * ground truth comes as either
 *   - the devkit's data/ILSVRC2012_validation_ground_truth.txt: line i holds the
 *     ILSVRC2012_ID (1-based) of image i, with a synset table giving each ID its WNID: the
 *     devkit's data/meta.mat (struct array 'synsets', fields ILSVRC2012_ID and WNID) or a
 *     text list whose line i starts with the WNID of ID i (LOC_synset_mapping.txt); or
 *   - Kaggle's LOC_val_solution.csv: "ImageId,PredictionString" lines whose prediction
 *     string starts with the WNID.
 * The IDs are not in sorted-WNID order: labels always go through the WNID to the line of
 * classes.txt, never from the ID. */
#ifndef DS_VALSET_H
#define DS_VALSET_H

#include "manifest.h"

#include <stddef.h>

typedef struct {
    const char *images;      /* the folder of validation images */
    const char *labels;      /* ground truth: the devkit's ID list or LOC_val_solution.csv */
    const char *synsets;     /* meta.mat or a WNID-per-line list; needed by an ID list */
    char *const *classes;    /* the training classes, label order */
    int nclasses;
    int subset;              /* leave out images of WNIDs not in classes (else an error) */
} ds_valset_options;

typedef struct {
    char *root;                  /* absolute path of the images folder */
    ds_manifest_entry *items;    /* sorted by (label, path); paths are file names */
    size_t n;
    size_t left_out;             /* images of other classes (subset only) */
    size_t unused_classes;       /* classes with no validation image */
} ds_valset;

/* Builds the manifest entries. Every error names the file and line: an unknown WNID, an ID
 * without a synset, a duplicate image or synset, an image the folder lacks, an image of the
 * folder the ground truth does not list. */
int ds_valset_build(ds_valset *v, const ds_valset_options *o);
void ds_valset_free(ds_valset *v);

#endif
