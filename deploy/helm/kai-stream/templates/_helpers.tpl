{{/* Names */}}
{{- define "kai-stream.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kai-stream.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Name of one component's objects: fullname-component. Call with (dict "root" $ "component" "binder"). */}}
{{- define "kai-stream.componentName" -}}
{{- printf "%s-%s" (include "kai-stream.fullname" .root) .component | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kai-stream.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: kai-stream
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
{{ include "kai-stream.selectorLabels" . }}
{{- end -}}

{{- define "kai-stream.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kai-stream.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "kai-stream.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The security protocol that follows from the TLS and SASL switches. */}}
{{- define "kai-stream.kafkaProtocol" -}}
{{- if and .Values.kafka.tls.enabled .Values.kafka.sasl.enabled -}}SASL_SSL
{{- else if .Values.kafka.tls.enabled -}}SSL
{{- else if .Values.kafka.sasl.enabled -}}SASL_PLAINTEXT
{{- else -}}PLAINTEXT
{{- end -}}
{{- end -}}

{{/* Environment every component shares: Kafka connection (KAI_STREAM_KAFKA_*), health port. */}}
{{- define "kai-stream.commonEnv" -}}
- name: KAI_STREAM_KAFKA_BOOTSTRAP_SERVERS
  value: {{ required "kafka.bootstrapServers is required" .Values.kafka.bootstrapServers | quote }}
- name: KAI_STREAM_KAFKA_CLIENT_ID
  value: {{ .Values.kafka.clientId | quote }}
- name: KAI_STREAM_KAFKA_SECURITY_PROTOCOL
  value: {{ include "kai-stream.kafkaProtocol" . | quote }}
{{- if .Values.kafka.tls.enabled }}
{{- if .Values.kafka.tls.caSecret.name }}
- name: KAI_STREAM_KAFKA_SSL_CAFILE
  value: /etc/kai-stream/kafka-ca/{{ .Values.kafka.tls.caSecret.key }}
{{- end }}
{{- if .Values.kafka.tls.clientCertSecret.name }}
- name: KAI_STREAM_KAFKA_SSL_CERTFILE
  value: /etc/kai-stream/kafka-client/{{ .Values.kafka.tls.clientCertSecret.certKey }}
- name: KAI_STREAM_KAFKA_SSL_KEYFILE
  value: /etc/kai-stream/kafka-client/{{ .Values.kafka.tls.clientCertSecret.keyKey }}
{{- end }}
{{- end }}
{{- if .Values.kafka.sasl.enabled }}
- name: KAI_STREAM_KAFKA_SASL_MECHANISM
  value: {{ .Values.kafka.sasl.mechanism | quote }}
{{- if .Values.kafka.sasl.usernameKey }}
- name: KAI_STREAM_KAFKA_SASL_USERNAME
  valueFrom:
    secretKeyRef:
      name: {{ required "kafka.sasl.secretName is required with sasl" .Values.kafka.sasl.secretName }}
      key: {{ .Values.kafka.sasl.usernameKey }}
{{- else }}
- name: KAI_STREAM_KAFKA_SASL_USERNAME
  value: {{ required "kafka.sasl.username or kafka.sasl.usernameKey is required with sasl" .Values.kafka.sasl.username | quote }}
{{- end }}
- name: KAI_STREAM_KAFKA_SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ required "kafka.sasl.secretName is required with sasl" .Values.kafka.sasl.secretName }}
      key: {{ .Values.kafka.sasl.passwordKey }}
{{- end }}
- name: KAI_STREAM_HEALTH_HOST
  value: "0.0.0.0"
- name: KAI_STREAM_HEALTH_PORT
  value: {{ .Values.health.port | quote }}
{{- end -}}

{{- define "kai-stream.volumeMounts" -}}
- name: tmp
  mountPath: /tmp
- name: data
  mountPath: /var/lib/kai-stream
{{- if and .Values.kafka.tls.enabled .Values.kafka.tls.caSecret.name }}
- name: kafka-ca
  mountPath: /etc/kai-stream/kafka-ca
  readOnly: true
{{- end }}
{{- if and .Values.kafka.tls.enabled .Values.kafka.tls.clientCertSecret.name }}
- name: kafka-client
  mountPath: /etc/kai-stream/kafka-client
  readOnly: true
{{- end }}
{{- end -}}

{{/* Volumes; call with (dict "root" $ "dataClaim" "<pvc name or empty>"). */}}
{{- define "kai-stream.volumes" -}}
{{- $v := .root.Values -}}
- name: tmp
  emptyDir: {}
{{- if .dataClaim }}
- name: data
  persistentVolumeClaim:
    claimName: {{ .dataClaim }}
{{- else }}
- name: data
  emptyDir: {}
{{- end }}
{{- if and $v.kafka.tls.enabled $v.kafka.tls.caSecret.name }}
- name: kafka-ca
  secret:
    secretName: {{ $v.kafka.tls.caSecret.name }}
    items:
      - key: {{ $v.kafka.tls.caSecret.key }}
        path: {{ $v.kafka.tls.caSecret.key }}
{{- end }}
{{- if and $v.kafka.tls.enabled $v.kafka.tls.clientCertSecret.name }}
- name: kafka-client
  secret:
    secretName: {{ $v.kafka.tls.clientCertSecret.name }}
{{- end }}
{{- end -}}

{{- define "kai-stream.podAnnotations" -}}
{{- if .Values.metrics.podAnnotations }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .Values.health.port | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- end -}}

{{- define "kai-stream.probes" -}}
ports:
  - name: http
    containerPort: {{ .Values.health.port }}
    protocol: TCP
livenessProbe:
  httpGet:
    path: /healthz
    port: http
  initialDelaySeconds: 10
  periodSeconds: 10
  timeoutSeconds: 3
  failureThreshold: 3
readinessProbe:
  httpGet:
    path: /readyz
    port: http
  periodSeconds: 5
  timeoutSeconds: 3
  failureThreshold: 3
{{- end -}}

{{/* Processor replicas: explicit, or one per node pool; never more than the partitions of cluster-events. */}}
{{- define "kai-stream.processorReplicas" -}}
{{- $partitions := int .Values.topics.clusterEventsPartitions -}}
{{- $replicas := 0 -}}
{{- if kindIs "invalid" .Values.processor.replicas -}}
{{- $replicas = min (len .Values.nodePools) $partitions | int -}}
{{- else -}}
{{- $replicas = int .Values.processor.replicas -}}
{{- end -}}
{{- if gt $replicas $partitions -}}
{{- fail (printf "processor.replicas (%d) must not exceed topics.clusterEventsPartitions (%d): extra replicas would own no partition" $replicas $partitions) -}}
{{- end -}}
{{- if lt $replicas 1 -}}
{{- fail "processor.replicas must be at least 1 (or nodePools must list at least one pool)" -}}
{{- end -}}
{{- $replicas -}}
{{- end -}}


{{/*
The pod template of one component. Call with
(dict "root" $ "component" "binder" "values" .Values.binder "args" (list "binder") "dataClaim" "" "env" (list)
 "volumes" (list) "mounts" (list)); the last three are optional.
*/}}
{{- define "kai-stream.podTemplate" -}}
{{- $root := .root -}}
{{- $v := .values -}}
metadata:
  labels:
    {{- include "kai-stream.selectorLabels" . | nindent 4 }}
  {{- with include "kai-stream.podAnnotations" $root | trim }}
  annotations:
    {{- . | nindent 4 }}
  {{- end }}
spec:
  serviceAccountName: {{ include "kai-stream.componentName" . }}
  automountServiceAccountToken: {{ has .component (list "connector" "binder") }}
  {{- with $root.Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  {{- with $v.runtimeClassName }}
  runtimeClassName: {{ . }}
  {{- end }}
  securityContext:
    {{- toYaml $root.Values.podSecurityContext | nindent 4 }}
  terminationGracePeriodSeconds: 30
  containers:
    - name: {{ .component }}
      image: {{ include "kai-stream.image" $root | quote }}
      imagePullPolicy: {{ $root.Values.image.pullPolicy }}
      command: [kai-stream]
      args:
        {{- toYaml (concat .args $v.extraArgs) | nindent 8 }}
      workingDir: /var/lib/kai-stream
      env:
        {{- include "kai-stream.commonEnv" $root | nindent 8 }}
        {{- with .env }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
        {{- with $v.extraEnv }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- include "kai-stream.probes" $root | nindent 6 }}
      resources:
        {{- toYaml $v.resources | nindent 8 }}
      securityContext:
        {{- toYaml $root.Values.securityContext | nindent 8 }}
      volumeMounts:
        {{- include "kai-stream.volumeMounts" $root | nindent 8 }}
        {{- with .mounts }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
  volumes:
    {{- include "kai-stream.volumes" (dict "root" $root "dataClaim" .dataClaim) | nindent 4 }}
    {{- with .volumes }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with $v.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}
