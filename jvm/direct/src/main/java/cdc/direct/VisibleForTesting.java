package cdc.direct;

import java.lang.annotation.Documented;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;

/** A member less private than its use needs, so that tests beside it can drive it (Guava's and
 * Iceberg's habit); nothing outside this package calls it. */
@Documented
@Retention(RetentionPolicy.SOURCE)
@interface VisibleForTesting {}
