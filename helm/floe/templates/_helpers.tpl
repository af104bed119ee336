{{/*
Names, labels and the wiring every role shares: the metadata addresses, the
store URL and the S3 credentials. Each is written once here so that a role
cannot be given another value than the others.
*/}}

{{- define "floe.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "floe.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "floe.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object; "component" is the role. */}}
{{- define "floe.labels" -}}
helm.sh/chart: {{ include "floe.chart" .root }}
{{ include "floe.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: floe
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Labels of a workload's pods: no chart or app version, so that a new chart
rolls only the pods whose spec it changes (the image is in the spec). The
selector labels are among them and never change.
*/}}
{{- define "floe.podLabels" -}}
{{ include "floe.selectorLabels" . }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: floe
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "floe.selectorLabels" -}}
app.kubernetes.io/name: {{ include "floe.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Every pod of this release, whatever its role (NetworkPolicy peers). */}}
{{- define "floe.releasePods" -}}
app.kubernetes.io/name: {{ include "floe.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "floe.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "floe.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The Floe image of a role (.role: its values): the role's image.tag, else
image.tag, else the chart's appVersion. A per-role tag lets an upgrade move
one role at a time (docs/upgrading.md). dig: values of an older chart, as
`helm upgrade --reuse-values` gives them, have no per-role image.
*/}}
{{- define "floe.image" -}}
{{- $tag := dig "image" "tag" "" (.role | default dict) }}
{{- $values := .root.Values }}
{{- printf "%s:%s" $values.image.repository (default .root.Chart.AppVersion (default $values.image.tag $tag)) }}
{{- end }}

{{/* The DNS suffix of a Service in this namespace. */}}
{{- define "floe.svcSuffix" -}}
{{- printf "%s.svc.%s" .Release.Namespace .Values.clusterDomain }}
{{- end }}

{{- define "floe.meta.headless" -}}
{{- printf "%s-meta-headless" (include "floe.fullname" .) }}
{{- end }}

{{/*
The metadata nodes' addresses: node N is pod <fullname>-meta-N (the
StatefulSet's ordinals start at 1, as Raft ids do), under the headless
Service, port 7070. Brokers, proxies and the indexer take the list as
FLOE_META; the nodes take it as their initial voters (FLOE_META_PEERS).
*/}}
{{- define "floe.meta.addresses" -}}
{{- $full := include "floe.fullname" . }}
{{- $headless := include "floe.meta.headless" . }}
{{- $suffix := include "floe.svcSuffix" . }}
{{- $out := list }}
{{- range $i := until (int .Values.metadata.replicas) }}
{{- $out = append $out (printf "%s-meta-%d.%s.%s:%d" $full (add1 $i) $headless $suffix 7070) }}
{{- end }}
{{- join "," $out }}
{{- end }}

{{- define "floe.meta.peers" -}}
{{- $out := list }}
{{- range $i, $addr := splitList "," (include "floe.meta.addresses" .) }}
{{- $out = append $out (printf "%d=%s" (add1 $i) $addr) }}
{{- end }}
{{- join "," $out }}
{{- end }}

{{/* The S3 endpoint: the bundled MinIO's Service, or s3.endpoint. */}}
{{- define "floe.s3.endpoint" -}}
{{- if .Values.minio.enabled }}
{{- printf "http://%s-minio.%s:9000" (include "floe.fullname" .) (include "floe.svcSuffix" .) }}
{{- else }}
{{- .Values.s3.endpoint }}
{{- end }}
{{- end }}

{{/*
The store URL of every role ("create" true: the bucket Job's, which makes
the bucket; the roles never do).
*/}}
{{- define "floe.store" -}}
{{- $s3 := .root.Values.s3 }}
{{- $path := $s3.bucket }}
{{- with $s3.prefix }}{{ $path = printf "%s/%s" $path (trimAll "/" .) }}{{ end }}
{{- $q := list }}
{{- with include "floe.s3.endpoint" .root }}{{ $q = append $q (printf "endpoint=%s" .) }}{{ end }}
{{- $q = append $q (printf "region=%s" $s3.region) }}
{{- $q = append $q (printf "path_style=%t" (or .root.Values.minio.enabled $s3.pathStyle)) }}
{{- $q = append $q (printf "create_bucket=%t" (default false .create)) }}
{{- printf "s3://%s?%s" $path (join "&" $q) }}
{{- end }}

{{/* The Secret with the S3 credentials, and its two keys. */}}
{{- define "floe.s3.secretName" -}}
{{- if and (not .Values.minio.enabled) .Values.s3.existingSecret }}
{{- .Values.s3.existingSecret }}
{{- else }}
{{- printf "%s-s3" (include "floe.fullname" .) }}
{{- end }}
{{- end }}

{{- define "floe.s3.env" -}}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ include "floe.s3.secretName" . }}
      key: {{ .Values.s3.accessKeyIdKey }}
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "floe.s3.secretName" . }}
      key: {{ .Values.s3.secretAccessKeyKey }}
{{- end }}

{{/* Environment every Floe container has. */}}
{{- define "floe.commonEnv" -}}
- name: RUST_LOG
  value: {{ .Values.logLevel | quote }}
- name: FLOE_LOG_FORMAT
  value: {{ .Values.logFormat | quote }}
{{- with .Values.otlpEndpoint }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ . | quote }}
{{- end }}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
{{- end }}

{{/* Pod-level settings of a role: .role is the role's values. */}}
{{- define "floe.podSpec" -}}
serviceAccountName: {{ include "floe.serviceAccountName" .root }}
automountServiceAccountToken: false
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .root.Values.podSecurityContext | nindent 2 }}
{{- with .role.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .role.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .role.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
affinity:
  {{- if .role.affinity }}
  {{- toYaml .role.affinity | nindent 2 }}
  {{- else }}
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels:
              {{- include "floe.selectorLabels" . | nindent 14 }}
  {{- end }}
topologySpreadConstraints:
  {{- if .role.topologySpreadConstraints }}
  {{- toYaml .role.topologySpreadConstraints | nindent 2 }}
  {{- else }}
  - maxSkew: 1
    topologyKey: topology.kubernetes.io/zone
    whenUnsatisfiable: ScheduleAnyway
    labelSelector:
      matchLabels:
        {{- include "floe.selectorLabels" . | nindent 8 }}
  {{- end }}
{{- end }}

{{/* Container-level settings every Floe container shares. */}}
{{- define "floe.container" -}}
image: {{ include "floe.image" . }}
imagePullPolicy: {{ .root.Values.image.pullPolicy }}
securityContext:
  {{- toYaml .root.Values.securityContext | nindent 2 }}
resources:
  {{- toYaml .role.resources | nindent 2 }}
{{- end }}

{{/* httpGet probes on a named port (HTTPS when .tls: the internal ports with internal TLS). */}}
{{- define "floe.probes" -}}
{{- $scheme := ternary "HTTPS" "HTTP" (default false .tls) -}}
startupProbe:
  httpGet:
    path: /livez
    port: {{ .port }}
    scheme: {{ $scheme }}
  periodSeconds: 2
  failureThreshold: 60
livenessProbe:
  httpGet:
    path: /livez
    port: {{ .port }}
    scheme: {{ $scheme }}
  periodSeconds: 10
  timeoutSeconds: 3
  failureThreshold: 3
readinessProbe:
  httpGet:
    path: /readyz
    port: {{ .port }}
    scheme: {{ $scheme }}
  periodSeconds: 5
  timeoutSeconds: 3
  failureThreshold: 2
{{- end }}

{{/* A pod annotation that rolls the pods when the S3 settings change. */}}
{{- define "floe.storeChecksum" -}}
checksum/store: {{ printf "%s|%s" (include "floe.store" (dict "root" .)) (include "floe.s3.secretName" .) | sha256sum | trunc 16 }}
{{- end }}

{{/*
Internal mTLS (security.internalTls): the Secret of an identity
(metadata-N, broker, proxy, indexer), with tls.crt, tls.key and ca.crt as
cert-manager writes them.
*/}}
{{- define "floe.internalTls.secret" -}}
{{- printf "%s-internal-tls-%s" (include "floe.fullname" .root) .identity }}
{{- end }}

{{/* The identities a role's pods may be: .identities (a list). */}}
{{- define "floe.internalTls.volume" -}}
{{- if .root.Values.security.internalTls.enabled }}
- name: internal-tls
  projected:
    sources:
      {{- range $i, $id := .identities }}
      - secret:
          name: {{ include "floe.internalTls.secret" (dict "root" $.root "identity" $id) }}
          items:
            {{- if eq $i 0 }}
            - key: ca.crt
              path: ca.crt
            {{- end }}
            - key: tls.crt
              path: {{ $id }}.crt
            - key: tls.key
              path: {{ $id }}.key
      {{- end }}
{{- end }}
{{- end }}

{{- define "floe.internalTls.mount" -}}
{{- if .Values.security.internalTls.enabled }}
- name: internal-tls
  mountPath: /etc/floe/internal-tls
  readOnly: true
{{- end }}
{{- end }}

{{/*
The environment of internal security: internal TLS with the certificate of
.identity (which may name an earlier variable, as metadata-$(FLOE_META_ID)),
else the cluster secret when one is given.
*/}}
{{- define "floe.internalSecurity.env" -}}
{{- $sec := .root.Values.security }}
{{- if $sec.internalTls.enabled }}
- name: FLOE_INTERNAL_TLS_CA
  value: /etc/floe/internal-tls/ca.crt
- name: FLOE_INTERNAL_TLS_CERT
  value: /etc/floe/internal-tls/{{ .identity }}.crt
- name: FLOE_INTERNAL_TLS_KEY
  value: /etc/floe/internal-tls/{{ .identity }}.key
{{- else if $sec.clusterSecret.existingSecret }}
- name: FLOE_CLUSTER_SECRET_FILE
  value: /etc/floe/cluster-secret/secret
{{- end }}
{{- end }}

{{- define "floe.clusterSecret.volume" -}}
{{- if and (not .Values.security.internalTls.enabled) .Values.security.clusterSecret.existingSecret }}
- name: cluster-secret
  secret:
    secretName: {{ .Values.security.clusterSecret.existingSecret }}
    items:
      - key: {{ .Values.security.clusterSecret.key }}
        path: secret
{{- end }}
{{- end }}

{{- define "floe.clusterSecret.mount" -}}
{{- if and (not .Values.security.internalTls.enabled) .Values.security.clusterSecret.existingSecret }}
- name: cluster-secret
  mountPath: /etc/floe/cluster-secret
  readOnly: true
{{- end }}
{{- end }}

{{/* Whether the Kafka listener speaks TLS. */}}
{{- define "floe.kafka.tls" -}}
{{- if has .Values.security.kafka.protocol (list "SSL" "SASL_SSL") }}true{{ end }}
{{- end }}

{{/* Non-empty when the pods mount internal security files. */}}
{{- define "floe.internalSecurity.files" -}}
{{- if or .Values.security.internalTls.enabled .Values.security.clusterSecret.existingSecret }}true{{ end }}
{{- end }}

{{/* The proxy's Kafka listener security (security.kafka). */}}
{{- define "floe.kafka.securityEnv" -}}
{{- $k := .Values.security.kafka }}
{{- if include "floe.kafka.tls" . }}
- name: FLOE_SSL_CERTFILE
  value: /etc/floe/kafka-tls/tls.crt
- name: FLOE_SSL_KEYFILE
  value: /etc/floe/kafka-tls/tls.key
- name: FLOE_SSL_CLIENT_AUTH
  value: {{ $k.tls.clientAuth | quote }}
{{- if ne $k.tls.clientAuth "none" }}
- name: FLOE_SSL_CAFILE
  value: /etc/floe/kafka-tls/ca.crt
{{- end }}
{{- end }}
{{- if has $k.protocol (list "SASL_PLAINTEXT" "SASL_SSL") }}
- name: FLOE_SASL_ENABLED_MECHANISMS
  value: {{ join "," $k.sasl.mechanisms | quote }}
{{- with $k.sasl.oauthbearer.jwksEndpointUrl }}
- name: FLOE_SASL_OAUTHBEARER_JWKS_ENDPOINT_URL
  value: {{ . | quote }}
{{- end }}
{{- with $k.sasl.oauthbearer.expectedAudience }}
- name: FLOE_SASL_OAUTHBEARER_EXPECTED_AUDIENCE
  value: {{ . | quote }}
{{- end }}
{{- with $k.sasl.oauthbearer.expectedIssuer }}
- name: FLOE_SASL_OAUTHBEARER_EXPECTED_ISSUER
  value: {{ . | quote }}
{{- end }}
{{- end }}
- name: FLOE_AUTHORIZER
  value: {{ $k.authorizer | quote }}
{{- with $k.superUsers }}
- name: FLOE_SUPER_USERS
  value: {{ join ";" . | quote }}
{{- end }}
{{- end }}

{{/* The `helm test` containers' client settings (a listener with security). */}}
{{- define "floe.test.clientMounts" -}}
- name: client
  mountPath: /etc/floe-test-client
  readOnly: true
{{- if include "floe.kafka.tls" . }}
- name: kafka-ca
  mountPath: /etc/floe-test-ca
  readOnly: true
{{- end }}
{{- end }}
